// SPDX-License-Identifier: MIT
// The random inputs of the mma emulation tests' products (test_matvec_mma_emulated.cpp,
// test_matmul_pipe_emulated.cpp, test_matmul_wgmma_emulated.cpp), drawn from the emulation tests' random stream (emu_random.h) in a
// fixed order: an affine-quantized weight matrix, then the activations (then, for emu_product, a bias).
#pragma once
#include <cstdint>
#include <vector>

#include "emu_random.h"
#include "emu_scales.h"
extern "C" {
#include "core/quant.h"
}

// The first 16-byte aligned element at or after p (the kernels' vector loads need it); the buffer
// holds 16 bytes more than it is used for.
template <class T> static inline T *emu_align16(T *p) {
    while (((uintptr_t)p & 15) != 0) p++;
    return p;
}

// A weight matrix [rows, cols] of affine `bits`-bit codes in groups of gs with scales and biases of
// type st; w points into the owned buffers (do not copy the struct).
struct emu_affine {
    mx_matrix w{};
    std::vector<uint8_t> data, sc, bi;
};

// Random code bytes, then per group a scale s in [0.002, 0.022) (one group in ten 30 times larger)
// and a bias -s 2^(bits-1) times [0.5, 1.5), so a group's values lie around zero.
static inline void emu_affine_random(emu_affine *m, int bits, int gs, mx_dtype st, int rows, int cols) {
    mx_matrix &w = m->w;
    w = mx_matrix{};
    w.q.mode = MX_QUANT_AFFINE, w.q.bits = bits, w.q.group_size = gs;
    w.dtype = MX_DTYPE_U32, w.scale_dtype = st, w.n_experts = 1, w.rows = rows, w.cols = cols;
    const int64_t rb = mx_matrix_row_bytes(&w), groups = cols / gs;
    m->data.assign((size_t)(rb * rows) + 16, 0);
    m->sc.assign((size_t)(rows * groups) * 4 + 16, 0);
    m->bi.assign(m->sc.size(), 0);
    for (auto &b : m->data) b = (uint8_t)emu_next();
    for (int64_t i = 0; i < rows * groups; i++) {
        const float s = (0.002f + 0.02f * emu_unit()) * (emu_unit() < 0.1f ? 30.0f : 1.0f);
        put_scale(m->sc, st, (size_t)i, s);
        put_scale(m->bi, st, (size_t)i, -s * (float)(1 << (bits - 1)) * (0.5f + emu_unit()));
    }
    w.data = m->data.data(), w.scales = m->sc.data(), w.biases = m->bi.data();
}

// Activations [n, cols] at a 16-byte aligned x inside buf (do not copy the struct): about normal
// in (-3, 3), one in a hundred 300 times larger.
struct emu_acts {
    std::vector<float> buf;
    float *x = nullptr;
};
static inline void emu_acts_random(emu_acts *a, int n, int cols) {
    a->buf.assign((size_t)n * cols + 4, 0.0f);
    a->x = emu_align16(a->buf.data());
    for (int i = 0; i < n * cols; i++) {
        float g = (emu_unit() + emu_unit() + emu_unit() - 1.5f) * 2.0f;
        a->x[i] = emu_unit() < 0.01f ? g * 300.0f : g;
    }
}

// One product's inputs, drawn in this order: the weight (emu_affine_random), the activations
// (emu_acts_random), then a bias per row in [-0.5, 0.5), drawn with or without with_bias so that the
// flag changes no other input (bp: the bias, or null without it). out [n, rows] starts at -7, a value
// that shows an element the product did not write. Do not copy the struct (m and acts own buffers).
struct emu_product {
    emu_affine m;
    emu_acts acts;
    std::vector<float> bias, out;
    const float *bp = nullptr;
};
static inline void emu_product_random(emu_product *p, int bits, int gs, mx_dtype st, int rows, int cols, int n,
                                      bool with_bias) {
    emu_affine_random(&p->m, bits, gs, st, rows, cols);
    emu_acts_random(&p->acts, n, cols);
    p->bias.assign((size_t)rows, 0.0f);
    for (auto &b : p->bias) b = emu_unit() - 0.5f;
    p->out.assign((size_t)n * rows, -7.0f);
    p->bp = with_bias ? p->bias.data() : nullptr;
}
