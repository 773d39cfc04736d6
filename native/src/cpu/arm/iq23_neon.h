// NEON dot products of the 2- and 3-bit lattice i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) against Q8_K, for the NEON unit (neon.cpp, built with -march=armv8.2-a+dotprod+fp16).
//
// They follow ggml-cpu's ARM vec_dots (ggml/src/ggml-cpu/arch/arm/quants.c, the __ARM_NEON path,
// the only vector path these have), as iquants_neon.h does for IQ4_NL / IQ4_XS. The integers:
// each sub-block of 32 is built as signed bytes (grid magnitudes times +1 / -1) and summed
// against the activations with SDOT, 4 adjacent products per int32 lane, lanes added across once
// per half (16 elements) - exact, so the build without dotprod (dot_s8's fallback) gives the
// same sums. The floats take one of two orders, as ggml writes them:
//   IQ2_XS, IQ2_S, IQ3_S: per super-block the exact integer sum over its sub-block halves of
//       (2 ls + 1) * dot, then sumf = fma(d_x * d_y, (float)sum, sumf); at the end s = c * sumf,
//       c = 1/8, 1/8, 1.
//   IQ2_XXS, IQ3_XXS: a sub-block's dot is scaled in float, even sub-blocks into one sum and odd
//       ones into another, sumf_p = fma((float)dot, 0.5 + ls, sumf_p); per super-block
//       sumf = fma(d_x * d_y, sumf_0 + sumf_1, sumf); at the end s = c * sumf, c = 1/4, 1/2.
// Every a * b + c of ggml's C is fused here: GCC compiles it for AArch64 with -ffp-contract=fast
// and nothing holds those contractions back on this target (iquants_neon.h's header says more).
// The scalar references (quant/ref_iq23.cpp) sum unfused in ggml's generic order, so these differ
// from them by rounding only (the first three by the fusion alone); dequantization stays the
// reference's.
#pragma once
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "cpu/arm/quants_neon.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"

namespace ei {
namespace {

// One sub-block of 32 as signed values: elements 0..15 in lo, 16..31 in hi; ls the 4-bit scale
// of each half.
struct Iq23SubNeon {
    int8x16_t lo, hi;
    int ls[2];
};

inline uint32_t iq23_u32_neon(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Two 8-byte table entries side by side (grid points, or sign bytes from kIqSigns.ones).
inline int8x16_t iq23_pair(const uint64_t* table, unsigned a, unsigned b) {
    return vcombine_s8(vld1_s8((const int8_t*)(table + a)), vld1_s8((const int8_t*)(table + b)));
}

// Four 4-byte grid points side by side.
inline int8x16_t iq23_quad(const uint32_t* grid, unsigned a, unsigned b, unsigned c, unsigned d) {
    const uint32_t points[4] = {grid[a], grid[b], grid[c], grid[d]};
    return vreinterpretq_s8_u32(vld1q_u32(points));
}

// 32 explicit sign bits (bit j: element j) applied to magnitudes lo (elements 0..15), hi (16..31).
inline void iq23_apply_sign_bits(const uint8_t* bits, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t set_lo, set_hi;
    bits_32(bits, set_lo, set_hi);  // 0xff where set
    lo = vmulq_s8(lo, vreinterpretq_s8_u8(vorrq_u8(set_lo, vdupq_n_u8(1))));
    hi = vmulq_s8(hi, vreinterpretq_s8_u8(vorrq_u8(set_hi, vdupq_n_u8(1))));
}

// Parity-completed sign codes at bits 0, 7, 14, 21 of `codes` applied to 4 groups of 8.
inline void iq23_apply_even_signs(uint32_t codes, int8x16_t& lo, int8x16_t& hi) {
    const uint64_t* ones = kIqSigns.ones;
    lo = vmulq_s8(lo, iq23_pair(ones, codes & 127, codes >> 7 & 127));
    hi = vmulq_s8(hi, iq23_pair(ones, codes >> 14 & 127, codes >> 21 & 127));
}

inline Iq23SubNeon iq23_sub_neon(const block_iq2_xxs& b, int ib) {
    const uint32_t idx = iq23_u32_neon(b.qs + 4 * ib), meta = iq23_u32_neon(b.qs + 4 * ib + 2);
    Iq23SubNeon s;
    s.lo = iq23_pair(kIq2xxsGrid, idx & 255, idx >> 8 & 255);
    s.hi = iq23_pair(kIq2xxsGrid, idx >> 16 & 255, idx >> 24);
    iq23_apply_even_signs(meta, s.lo, s.hi);
    s.ls[0] = s.ls[1] = (int)(meta >> 28);
    return s;
}

inline Iq23SubNeon iq23_sub_neon(const block_iq2_xs& b, int ib) {
    const uint16_t* q = b.qs + 4 * ib;
    const uint64_t* ones = kIqSigns.ones;
    Iq23SubNeon s;
    s.lo = vmulq_s8(iq23_pair(kIq2xsGrid, q[0] & 511, q[1] & 511), iq23_pair(ones, q[0] >> 9, q[1] >> 9));
    s.hi = vmulq_s8(iq23_pair(kIq2xsGrid, q[2] & 511, q[3] & 511), iq23_pair(ones, q[2] >> 9, q[3] >> 9));
    s.ls[0] = b.scales[ib] & 15;
    s.ls[1] = b.scales[ib] >> 4;
    return s;
}

inline Iq23SubNeon iq23_sub_neon(const block_iq2_s& b, int ib) {
    const uint8_t* q = b.qs + 4 * ib;
    const unsigned h = b.qh[ib];
    Iq23SubNeon s;
    s.lo = iq23_pair(kIq2sGrid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300));
    s.hi = iq23_pair(kIq2sGrid, q[2] | (h << 4 & 0x300), q[3] | (h << 2 & 0x300));
    iq23_apply_sign_bits(b.qs + QK_K / 8 + 4 * ib, s.lo, s.hi);
    s.ls[0] = b.scales[ib] & 15;
    s.ls[1] = b.scales[ib] >> 4;
    return s;
}

inline Iq23SubNeon iq23_sub_neon(const block_iq3_xxs& b, int ib) {
    const uint8_t* q = b.qs + 8 * ib;
    const uint32_t meta = iq23_u32_neon(b.qs + QK_K / 4 + 4 * ib);
    Iq23SubNeon s;
    s.lo = iq23_quad(kIq3xxsGrid, q[0], q[1], q[2], q[3]);
    s.hi = iq23_quad(kIq3xxsGrid, q[4], q[5], q[6], q[7]);
    iq23_apply_even_signs(meta, s.lo, s.hi);
    s.ls[0] = s.ls[1] = (int)(meta >> 28);
    return s;
}

inline Iq23SubNeon iq23_sub_neon(const block_iq3_s& b, int ib) {
    const uint8_t* q = b.qs + 8 * ib;
    const unsigned h = b.qh[ib];
    auto index = [&](int k) { return q[k] | (h >> k & 1) << 8; };
    Iq23SubNeon s;
    s.lo = iq23_quad(kIq3sGrid, index(0), index(1), index(2), index(3));
    s.hi = iq23_quad(kIq3sGrid, index(4), index(5), index(6), index(7));
    iq23_apply_sign_bits(b.signs + 4 * ib, s.lo, s.hi);
    s.ls[0] = s.ls[1] = b.scales[ib / 2] >> 4 * (ib % 2) & 15;
    return s;
}

// The dots of a sub-block's two halves with 32 activations.
inline void iq23_half_dots(const Iq23SubNeon& s, const int8_t* y, int dot[2]) {
    dot[0] = vaddvq_s32(dot_s8(vdupq_n_s32(0), s.lo, vld1q_s8(y)));
    dot[1] = vaddvq_s32(dot_s8(vdupq_n_s32(0), s.hi, vld1q_s8(y + 16)));
}

// IQ2_XS, IQ2_S, IQ3_S: one exact integer per super-block (the header's first order).
template <class Block>
void vec_dot_iq23_int_neon(int64_t n, float* s, const void* vx, const void* vy, float c) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int32_t sum = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const Iq23SubNeon sub = iq23_sub_neon(x[i], ib);
            int dot[2];
            iq23_half_dots(sub, y[i].qs + 32 * ib, dot);
            sum += (2 * sub.ls[0] + 1) * dot[0] + (2 * sub.ls[1] + 1) * dot[1];
        }
        sumf = std::fma(h2f(x[i].d) * y[i].d, (float)sum, sumf);
    }
    *s = c * sumf;
}

// IQ2_XXS, IQ3_XXS: sub-blocks scaled in float, even and odd apart (the header's second order).
template <class Block>
void vec_dot_iq23_float_neon(int64_t n, float* s, const void* vx, const void* vy, float c) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        float sumf_p[2] = {0.0f, 0.0f};
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const Iq23SubNeon sub = iq23_sub_neon(x[i], ib);
            int dot[2];
            iq23_half_dots(sub, y[i].qs + 32 * ib, dot);
            sumf_p[ib % 2] = std::fma((float)(dot[0] + dot[1]), 0.5f + (float)sub.ls[0], sumf_p[ib % 2]);
        }
        sumf = std::fma(h2f(x[i].d) * y[i].d, sumf_p[0] + sumf_p[1], sumf);
    }
    *s = c * sumf;
}

void vec_dot_iq2_xxs_q8_K_neon(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_float_neon<block_iq2_xxs>(n, s, x, y, 0.25f);
}
void vec_dot_iq2_xs_q8_K_neon(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_int_neon<block_iq2_xs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_s_q8_K_neon(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_int_neon<block_iq2_s>(n, s, x, y, 0.125f);
}
void vec_dot_iq3_xxs_q8_K_neon(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_float_neon<block_iq3_xxs>(n, s, x, y, 0.5f);
}
void vec_dot_iq3_s_q8_K_neon(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_int_neon<block_iq3_s>(n, s, x, y, 1.0f);
}

inline void fill_kernels_iq23_neon(KernelTable& t) {
    t.types[TYPE_IQ2_XXS].vec_dot = vec_dot_iq2_xxs_q8_K_neon;
    t.types[TYPE_IQ2_XS].vec_dot = vec_dot_iq2_xs_q8_K_neon;
    t.types[TYPE_IQ2_S].vec_dot = vec_dot_iq2_s_q8_K_neon;
    t.types[TYPE_IQ3_XXS].vec_dot = vec_dot_iq3_xxs_q8_K_neon;
    t.types[TYPE_IQ3_S].vec_dot = vec_dot_iq3_s_q8_K_neon;
}

}  // namespace
}  // namespace ei
