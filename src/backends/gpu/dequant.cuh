// SPDX-License-Identifier: MIT
// On-the-fly dequantization of weight rows on the device, one template per storage format, matching
// mx_matrix_dequant_row (src/core/quant.c) for every format the CPU backend reads: dense F32/F16/BF16,
// affine 2/3/4/5/6/8-bit (groups 32/64/128, scales and biases BF16/F16/F32), mxfp4, mxfp8, nvfp4.
//
// Two access shapes:
// - chunk(): the 32 weights 32c..32c+31 of a row, with the widest aligned loads the format allows
//   (a chunk of a packed format is exactly BITS u32 words and never straddles a scale group). Used
//   by the decode matrix-vector kernels, which read each weight byte once.
// - oct(): 8 weights starting at j0 (a multiple of 8), byte-granular. Used by the tiled kernels
//   (prefill matmul, embedding) where a weight tile is reused many times.
// Rows are counted across experts (expert e row r = e * rows + r), as in quant.h.
#ifndef MXG_DEQUANT_CUH
#define MXG_DEQUANT_CUH

#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"

// Matrix geometry as kernels see it (passed by value).
struct MatView {
    const uint8_t *data;   // [E * rows, row_bytes]
    const void *scales;    // [E * rows, groups]
    const void *biases;    // [E * rows, groups] (affine only)
    int64_t rows;          // rows of one expert
    int64_t row_bytes;
    int cols;
    int groups;            // scale groups per row
    int group_size;
    int group_shift;       // log2(group_size): groups are powers of two, so no division on the device
};

enum { KIND_DENSE, KIND_AFFINE, KIND_MXFP4, KIND_MXFP8, KIND_NVFP4 };
enum { ST_F32, ST_F16, ST_BF16 };  // float storage types (dense elements, affine scales)

template <int ST>
__device__ __forceinline__ float load_st(const void *base, int64_t i) {
    if (ST == ST_F32) return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return ST == ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// The 4-byte word around the 2-byte (or the 4-byte) element i of a scale or bias array: what the
// cp.async products (vendor/cuda/matmul_pipe.cu, matvec_mma.cu) copy (the array 4-byte aligned).
template <int ST>
__device__ __forceinline__ const void *sb_word(const void *base, int64_t i) {
    return ST == ST_F32 ? (const void *)((const float *)base + i) : (const void *)((const uint16_t *)base + (i & ~1));
}

// The scale or bias as a float from its copied word (par: the parity of the element's index).
template <int ST>
__device__ __forceinline__ float sb_value(uint32_t word, int par) {
    if (ST == ST_F32) return __uint_as_float(word);
    const uint16_t h = (uint16_t)(word >> (16 * par));
    return ST == ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// The BITS u32 words of one 32-element chunk, with vector loads where alignment is guaranteed
// (row_bytes = cols * BITS / 8 with cols a multiple of 32).
template <int BITS>
__device__ __forceinline__ void load_chunk_words(const uint32_t *p, uint32_t (&w)[BITS]) {
    if (BITS == 4 || BITS == 8) {
#pragma unroll
        for (int i = 0; i < BITS / 4; i++) {
            uint4 v = ((const uint4 *)p)[i];
            w[4 * i] = v.x;
            w[4 * i + 1] = v.y;
            w[4 * i + 2] = v.z;
            w[4 * i + 3] = v.w;
        }
    } else if (BITS == 2 || BITS == 6) {
#pragma unroll
        for (int i = 0; i < BITS / 2; i++) {
            uint2 v = ((const uint2 *)p)[i];
            w[2 * i] = v.x;
            w[2 * i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < BITS; i++) w[i] = p[i];
    }
}

// Code j (0..31) of a chunk; with j a compile-time constant every shift folds.
template <int BITS>
__device__ __forceinline__ uint32_t chunk_code(const uint32_t (&w)[BITS], int j) {
    const int bit = j * BITS, wi = bit >> 5, sh = bit & 31;
    uint32_t v = w[wi] >> sh;
    if (sh + BITS > 32) v |= w[(wi + 1) < BITS ? wi + 1 : wi] << (32 - sh);
    return v & ((1u << BITS) - 1u);
}

template <int KIND, int BITS, int ST>
struct Fmt {
    static constexpr int kind = KIND, bits = BITS, st = ST;

    // w[0..31] = dequantized elements 32c.. of row `row`; elements past cols read as 0.
    static __device__ __forceinline__ void chunk(const MatView &m, int64_t row, int c, float (&w)[32]) {
        const uint8_t *rp = m.data + row * m.row_bytes;
        if constexpr (KIND == KIND_DENSE) {
            const int j0 = c * 32;
            const int esz = ST == ST_F32 ? 4 : 2;
            bool vec = j0 + 32 <= m.cols && ((uintptr_t)(rp + (int64_t)j0 * esz) & 15) == 0;
            if (vec && ST == ST_F32) {
                const float4 *p = (const float4 *)(rp + (int64_t)j0 * 4);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    float4 v = p[i];
                    w[4 * i] = v.x;
                    w[4 * i + 1] = v.y;
                    w[4 * i + 2] = v.z;
                    w[4 * i + 3] = v.w;
                }
            } else if (vec) {
                const uint4 *p = (const uint4 *)(rp + (int64_t)j0 * 2);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    uint4 v = p[i];
                    uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        uint16_t lo = (uint16_t)(u[k] & 0xffffu), hi = (uint16_t)(u[k] >> 16);
                        w[8 * i + 2 * k] = ST == ST_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
                        w[8 * i + 2 * k + 1] = ST == ST_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++) w[i] = j0 + i < m.cols ? load_st<ST>(rp, j0 + i) : 0.0f;
            }
        } else {
        uint32_t q[BITS];
        if (KIND == KIND_NVFP4) {
            // Rows are only 8-byte aligned and may end half way through the chunk (cols % 32 == 16).
            const uint2 *p = (const uint2 *)((const uint32_t *)rp + c * BITS);
            uint2 a = p[0], b = c * 32 + 16 < m.cols ? p[1] : make_uint2(0u, 0u);
            q[0] = a.x;
            q[1] = a.y;
            q[2 % BITS] = b.x;
            q[3 % BITS] = b.y;
        } else {
            load_chunk_words<BITS>((const uint32_t *)rp + c * BITS, q);
        }
        if (KIND == KIND_AFFINE) {
            int64_t si = row * m.groups + ((c * 32) >> m.group_shift);
            float s = load_st<ST>(m.scales, si), b = load_st<ST>(m.biases, si);
#pragma unroll
            for (int i = 0; i < 32; i++) w[i] = s * (float)chunk_code<BITS>(q, i) + b;
        } else if (KIND == KIND_MXFP4 || KIND == KIND_MXFP8) {
            float s = e8m0_to_f32(((const uint8_t *)m.scales)[row * m.groups + c]);
#pragma unroll
            for (int i = 0; i < 32; i++) {
                uint32_t code = chunk_code<BITS>(q, i);
                w[i] = s * (KIND == KIND_MXFP4 ? e2m1_to_f32(code) : e4m3_to_f32(code));
            }
        } else {  // NVFP4: two groups of 16 per chunk; a row may end after the first half.
            const uint8_t *sp = (const uint8_t *)m.scales + row * m.groups + 2 * c;
            float s0 = e4m3_to_f32(sp[0]);
            bool second = c * 32 + 16 < m.cols;
            float s1 = second ? e4m3_to_f32(sp[1]) : 0.0f;
#pragma unroll
            for (int i = 0; i < 32; i++) w[i] = (i < 16 ? s0 : s1) * e2m1_to_f32(chunk_code<BITS>(q, i));
        }
        }
    }

    // The raw form of one full chunk (32 elements, cols % 32 == 0): packed words plus scales, so a
    // matrix-vector kernel can keep several rows in registers and dequantize inside the dot product.
    static constexpr int raw_words = KIND == KIND_DENSE ? (ST == ST_F32 ? 32 : 16) : BITS;
    struct Raw {
        uint32_t q[raw_words];
        float s0, s1, b;
    };

    static __device__ __forceinline__ void load_raw(const MatView &m, int64_t row, int c, Raw &r) {
        const uint32_t *p = (const uint32_t *)(m.data + row * m.row_bytes) + c * raw_words;
        if constexpr (KIND == KIND_DENSE) {
#pragma unroll
            for (int i = 0; i < raw_words / 4; i++) {
                uint4 v = ((const uint4 *)p)[i];
                r.q[4 * i] = v.x, r.q[4 * i + 1] = v.y, r.q[4 * i + 2] = v.z, r.q[4 * i + 3] = v.w;
            }
            r.s0 = r.s1 = 1.0f, r.b = 0.0f;
        } else {
            load_chunk_words<BITS>(p, r.q);
            if constexpr (KIND == KIND_AFFINE) {
                int64_t si = row * m.groups + ((c * 32) >> m.group_shift);
                r.s0 = load_st<ST>(m.scales, si);
                r.b = load_st<ST>(m.biases, si);
                r.s1 = r.s0;
            } else if constexpr (KIND == KIND_NVFP4) {
                const uint8_t *sp = (const uint8_t *)m.scales + row * m.groups + 2 * c;
                r.s0 = e4m3_to_f32(sp[0]);
                r.s1 = e4m3_to_f32(sp[1]);
                r.b = 0.0f;
            } else {
                r.s0 = r.s1 = e8m0_to_f32(((const uint8_t *)m.scales)[row * m.groups + c]);
                r.b = 0.0f;
            }
        }
    }

    // Code -> float in two integer ops (shift + lop3), no conversion: the code goes into the top
    // mantissa bits of 1.0, giving exactly 1 + q / 2^BITS. The dot product then collects
    // sum((1 + q/2^B) x) = sum(x) + sum(q x) / 2^B, and sum(q x) = 2^B (that - sum(x)); the
    // subtraction loses at most ~2 bits (the terms are within a factor 2 of each other).
    static __device__ __forceinline__ float code_unit(const uint32_t (&w)[BITS > 0 ? BITS : 1], int j) {
        const int bit = j * BITS, wi = bit >> 5, sh = bit & 31;
        const int up = 23 - BITS;  // destination of the code's lowest bit
        uint32_t v;
        if (sh + BITS <= 32) {
            v = sh >= up ? (w[wi] >> (sh - up)) : (w[wi] << (up - sh));
        } else {
            v = chunk_code<BITS>(w, j) << up;
        }
        return __uint_as_float(0x3f800000u | (v & (((1u << BITS) - 1u) << up)));
    }

    // dot(dequantized chunk, x[0..31]); xsum = sum of x[0..31] (affine folds its bias into it).
    static __device__ __forceinline__ float dot_raw(const Raw &r, const float (&x)[32], float xsum) {
        if constexpr (KIND == KIND_DENSE) {
            float a = 0.0f;
            if constexpr (ST == ST_F32) {
#pragma unroll
                for (int i = 0; i < 32; i++) a = fmaf(__uint_as_float(r.q[i]), x[i], a);
            } else {
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    float lo, hi;
                    if constexpr (ST == ST_BF16) {
                        lo = __uint_as_float(r.q[i] << 16), hi = __uint_as_float(r.q[i] & 0xffff0000u);
                    } else {
                        lo = f16_to_f32((uint16_t)(r.q[i] & 0xffffu)), hi = f16_to_f32((uint16_t)(r.q[i] >> 16));
                    }
                    a = fmaf(lo, x[2 * i], a);
                    a = fmaf(hi, x[2 * i + 1], a);
                }
            }
            return a;
        } else if constexpr (KIND == KIND_AFFINE) {
            float a = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; i++) a = fmaf(code_unit(r.q, i), x[i], a);
            const float qx = (a - xsum) * (float)(1u << BITS);
            return fmaf(r.s0, qx, r.b * xsum);
        } else {
            float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; i++) {
                uint32_t code = chunk_code<BITS>(r.q, i);
                float e = KIND == KIND_MXFP8 ? e4m3_to_f32(code) : e2m1_to_f32(code);
                if (i < 16)
                    a0 = fmaf(e, x[i], a0);
                else
                    a1 = fmaf(e, x[i], a1);
            }
            return fmaf(r.s0, a0, r.s1 * a1);
        }
    }

    // 8 weights starting at j0 (j0 % 8 == 0) in two steps, so tiled kernels can issue the loads of
    // the next tile before computing on the current one: oct_load reads, oct_decode dequantizes.
    struct Oct {
        uint64_t v;     // packed codes (BITS bytes)
        float s, b;     // scale and bias of the group
        float d[8];     // dense elements
        bool valid;     // false past cols
    };

    static __device__ __forceinline__ void oct_load(const MatView &m, int64_t row, int j0, Oct &o) {
        const uint8_t *rp = m.data + row * m.row_bytes;
        o.valid = j0 < m.cols;
        o.v = 0, o.s = 0.0f, o.b = 0.0f;
        if constexpr (KIND == KIND_DENSE) {
#pragma unroll
            for (int i = 0; i < 8; i++) o.d[i] = j0 + i < m.cols ? load_st<ST>(rp, j0 + i) : 0.0f;
        } else {
            if (!o.valid) return;
            const uint8_t *p = rp + (int64_t)(j0 >> 3) * BITS;  // 8 codes = BITS bytes
            if (BITS == 4) {
                o.v = *(const uint32_t *)p;
            } else if (BITS == 8) {
                uint2 u = *(const uint2 *)p;
                o.v = u.x | ((uint64_t)u.y << 32);
            } else {
#pragma unroll
                for (int i = 0; i < BITS; i++) o.v |= (uint64_t)p[i] << (8 * i);
            }
            if constexpr (KIND == KIND_AFFINE) {
                int64_t si = row * m.groups + (j0 >> m.group_shift);
                o.s = load_st<ST>(m.scales, si);
                o.b = load_st<ST>(m.biases, si);
            } else {
                uint8_t sb = ((const uint8_t *)m.scales)[row * m.groups + (j0 >> (KIND == KIND_NVFP4 ? 4 : 5))];
                o.s = KIND == KIND_NVFP4 ? e4m3_to_f32(sb) : e8m0_to_f32(sb);
            }
        }
    }

    static __device__ __forceinline__ void oct_decode(const Oct &o, float (&w)[8]) {
        if constexpr (KIND == KIND_DENSE) {
#pragma unroll
            for (int i = 0; i < 8; i++) w[i] = o.d[i];
        } else {
            const uint32_t mask = (1u << BITS) - 1u;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t code = (uint32_t)(o.v >> (i * BITS)) & mask;
                float e;
                if constexpr (KIND == KIND_AFFINE)  // exact code -> float without a conversion instruction
                    e = fmaf(o.s, __uint_as_float(0x4b000000u | code) - 8388608.0f, o.b);
                else
                    e = o.s * (KIND == KIND_MXFP8 ? e4m3_to_f32(code) : e2m1_to_f32(code));
                w[i] = o.valid ? e : 0.0f;
            }
        }
    }

    // w[0..7] = dequantized elements j0..j0+7 (j0 % 8 == 0) of row `row`; past cols reads 0.
    static __device__ __forceinline__ void oct(const MatView &m, int64_t row, int j0, float (&w)[8]) {
        Oct o;
        oct_load(m, row, j0, o);
        oct_decode(o, w);
    }
};

// Calls fn(Fmt<...>{}) with the format of a matrix. Returns false for a format with no kernel (the
// backend's supports() says so first; callers assert).
template <class Fn>
static bool dispatch_format(const mx_matrix *w, Fn &&fn) {
    switch (w->q.mode) {
    case MX_QUANT_NONE:
        switch (w->dtype) {
        case MX_DTYPE_F32: fn(Fmt<KIND_DENSE, 32, ST_F32>{}); return true;
        case MX_DTYPE_F16: fn(Fmt<KIND_DENSE, 16, ST_F16>{}); return true;
        case MX_DTYPE_BF16: fn(Fmt<KIND_DENSE, 16, ST_BF16>{}); return true;
        default: return false;
        }
    case MX_QUANT_AFFINE: {
        if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return false;
#define MXG_AFFINE_ST(B)                                                                       \
    switch (w->scale_dtype) {                                                                  \
    case MX_DTYPE_F32: fn(Fmt<KIND_AFFINE, B, ST_F32>{}); return true;                         \
    case MX_DTYPE_F16: fn(Fmt<KIND_AFFINE, B, ST_F16>{}); return true;                         \
    case MX_DTYPE_BF16: fn(Fmt<KIND_AFFINE, B, ST_BF16>{}); return true;                       \
    default: return false;                                                                     \
    }
        switch (w->q.bits) {
        case 2: MXG_AFFINE_ST(2)
        case 3: MXG_AFFINE_ST(3)
        case 4: MXG_AFFINE_ST(4)
        case 5: MXG_AFFINE_ST(5)
        case 6: MXG_AFFINE_ST(6)
        case 8: MXG_AFFINE_ST(8)
        default: return false;
        }
#undef MXG_AFFINE_ST
    }
    case MX_QUANT_MXFP4:
        if (w->q.bits != 4 || w->q.group_size != 32) return false;
        fn(Fmt<KIND_MXFP4, 4, ST_F32>{});
        return true;
    case MX_QUANT_MXFP8:
        if (w->q.bits != 8 || w->q.group_size != 32) return false;
        fn(Fmt<KIND_MXFP8, 8, ST_F32>{});
        return true;
    case MX_QUANT_NVFP4:
        if (w->q.bits != 4 || w->q.group_size != 16) return false;
        fn(Fmt<KIND_NVFP4, 4, ST_F32>{});
        return true;
    }
    return false;
}

static inline MatView mat_view(const mx_matrix *w) {
    MatView m;
    m.data = (const uint8_t *)w->data;
    m.scales = w->scales;
    m.biases = w->biases;
    m.rows = w->rows;
    m.row_bytes = mx_matrix_row_bytes(w);
    m.cols = (int)w->cols;
    m.group_size = w->q.mode == MX_QUANT_NONE ? 0 : w->q.group_size;
    m.groups = w->q.mode == MX_QUANT_NONE ? 0 : (int)(w->cols / w->q.group_size);
    m.group_shift = 0;
    while (m.group_size > 0 && (1 << m.group_shift) < m.group_size) m.group_shift++;
    return m;
}

#endif
