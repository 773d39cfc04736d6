// NEON dot products of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) with Q8_K activations, for
// the NEON unit (neon.cpp).
//
// Same policy as quants_neon.h. kints_neon forms a super-block's integers exactly as the
// scalar reference (quant/ref_kquants.cpp) defines them - sumi = sum over sub-blocks of
// scale * dot(q, q8), and for the types with minimums summ = sum of min * (Q8_K block sums) -
// in int32 lanes (SDOT per 16 elements, times the sub-block scale lane-wise, added across lanes
// once per super-block). vec_dot_k_neon then combines them in float by the reference's
// expression with the contractions GCC applies to it on AArch64 written out:
//   q2_K, q4_K, q5_K:  sumf = sumf + fma(d, (float)sumi, -(dmin * (float)summ)),  d = d_y * d_x, dmin = d_y * dmin_x
//   q3_K, q6_K:        sumf = fma(d_y * d_x, (float)sumi, sumf)
// (one float step per 256 elements), which gives the reference's bits as GCC 12 builds it.
// Ranges: |q| <= 32 (q6_K centred), |q8| <= 127, |scale| <= 63 (<= 128 for q6_K): a super-block
// sum stays below 2^28, and Q8_K block sums of 32 elements below 2^13 (int16 is enough).
//
// The Q8_K activations come from ref::from_float_q8_K here (the x86 tables have a vectorized copy).
#pragma once
#include <arm_neon.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "cpu/arm/quants_neon.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// acc + scale * (the 16 products q[i] * y[i], summed 4 per lane).
inline int32x4_t dot_scaled_16(int32x4_t acc, int8x16_t q, const int8_t* y, int scale) {
    return vmlaq_n_s32(acc, dot_s8(vdupq_n_s32(0), q, vld1q_s8(y)), scale);
}

// sum(a[i] * b[i]) over 16 int16 values, in int32 (exact for 4-bit minimums times block sums).
inline int dot_s16x16(int16x8_t a0, int16x8_t a1, int16x8_t b0, int16x8_t b1) {
    int32x4_t p = vmull_s16(vget_low_s16(a0), vget_low_s16(b0));
    p = vmlal_high_s16(p, a0, b0);
    p = vmlal_s16(p, vget_low_s16(a1), vget_low_s16(b1));
    p = vmlal_high_s16(p, a1, b1);
    return vaddvq_s32(p);
}

// q4_K / q5_K: the 8 scales (sc) and 8 mins (mn) of the 12 packed bytes, 6 bits each
// (the reference's unpack_scales_k4).
inline void unpack_scales_mins_k4_neon(const uint8_t* packed, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t a[3];
    std::memcpy(a, packed, 12);
    const uint32_t m6 = 0x3f3f3f3f, lo4 = 0x0f0f0f0f, top2 = 0x03030303;
    const uint32_t w[4] = {
        a[0] & m6,                                          // scales 0..3
        (a[2] & lo4) | (((a[0] >> 6) & top2) << 4),         // scales 4..7
        a[1] & m6,                                          // mins 0..3
        ((a[2] >> 4) & lo4) | (((a[1] >> 6) & top2) << 4),  // mins 4..7
    };
    std::memcpy(sc, w, 8);
    std::memcpy(mn, w + 2, 8);
}

// q4_K / q5_K minimum term: sum over the 8 sub-blocks of mn[s] * (bsums[2s] + bsums[2s + 1]).
inline int mins_dot_bsums_k4_neon(const uint8_t mn[8], const int16_t* bsums) {
    const int16x8_t pairs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));  // sub-block sums 0..7
    const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
    int32x4_t p = vmull_s16(vget_low_s16(mins), vget_low_s16(pairs));
    p = vmlal_high_s16(p, mins, pairs);
    return vaddvq_s32(p);
}

// ---- the integers of one super-block ----------------------------------------------------------

// sumi = sum over sub-blocks of scale * dot(q, q8); summ = sum of min * Q8_K block sums (0 for
// the types without a minimum). Exact, and the same integers as the reference's.
struct KInts {
    int sumi = 0;
    int summ = 0;
};

inline KInts kints_neon(const block_q2_K& b, const block_q8_K& y) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    // scales[s]: scale in the low nibble, minimum in the high one (16 sub-blocks of 16)
    const uint8x16_t packed = vld1q_u8(b.scales);
    uint8_t sc[16];
    vst1q_u8(sc, vandq_u8(packed, vdupq_n_u8(0x0F)));
    const uint8x16_t mn = vshrq_n_u8(packed, 4);
    KInts r;
    r.summ = dot_s16x16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn))), vreinterpretq_s16_u16(vmovl_high_u8(mn)),
                        vld1q_s16(y.bsums), vld1q_s16(y.bsums + 8));
    int32x4_t acc = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++) {  // 128-element halves, 32 bytes of 2-bit quants each
        uint8x16_t b0 = vld1q_u8(b.qs + 32 * h), b1 = vld1q_u8(b.qs + 32 * h + 16);
        const int8_t* q8 = y.qs + 128 * h;
        for (int k = 0; k < 4; k++) {  // chunk k: bits 2k..2k+1 of every byte, sub-blocks 8h+2k, 8h+2k+1
            acc = dot_scaled_16(acc, vreinterpretq_s8_u8(vandq_u8(b0, m3)), q8 + 32 * k, sc[8 * h + 2 * k]);
            acc = dot_scaled_16(acc, vreinterpretq_s8_u8(vandq_u8(b1, m3)), q8 + 32 * k + 16, sc[8 * h + 2 * k + 1]);
            b0 = vshrq_n_u8(b0, 2);
            b1 = vshrq_n_u8(b1, 2);
        }
    }
    r.sumi = vaddvq_s32(acc);
    return r;
}

inline KInts kints_neon(const block_q3_K& b, const block_q8_K& y) {
    const uint8x16_t m3 = vdupq_n_u8(3), one = vdupq_n_u8(1);
    const int8x16_t four = vdupq_n_s8(4);
    // The 16 6-bit scales minus 32: low nibbles from bytes 0..7, top 2 bits from bytes 8..11.
    uint32_t a[3];
    std::memcpy(a, b.scales, 12);
    const uint32_t lo4 = 0x0f0f0f0f, top2 = 0x03030303;
    const uint32_t w[4] = {
        (a[0] & lo4) | ((a[2] & top2) << 4),                // scales 0..3
        (a[1] & lo4) | (((a[2] >> 2) & top2) << 4),         // scales 4..7
        ((a[0] >> 4) & lo4) | (((a[2] >> 4) & top2) << 4),  // scales 8..11
        ((a[1] >> 4) & lo4) | (((a[2] >> 6) & top2) << 4),  // scales 12..15
    };
    int8_t sc[16];
    vst1q_s8(sc, vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(w)), vdupq_n_s8(32)));

    // hmask[l] bit c is the high bit of element 32c + l; chunks are taken in order c = 0..7.
    uint8x16_t hm0 = vld1q_u8(b.hmask), hm1 = vld1q_u8(b.hmask + 16);
    int32x4_t acc = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++) {
        uint8x16_t b0 = vld1q_u8(b.qs + 32 * h), b1 = vld1q_u8(b.qs + 32 * h + 16);
        const int8_t* q8 = y.qs + 128 * h;
        for (int k = 0; k < 4; k++) {
            // q = low 2 bits - (high bit clear ? 4 : 0) = (low | high bit << 2) - 4
            const uint8x16_t u0 = vorrq_u8(vandq_u8(b0, m3), vshlq_n_u8(vandq_u8(hm0, one), 2));
            const uint8x16_t u1 = vorrq_u8(vandq_u8(b1, m3), vshlq_n_u8(vandq_u8(hm1, one), 2));
            acc = dot_scaled_16(acc, vsubq_s8(vreinterpretq_s8_u8(u0), four), q8 + 32 * k, sc[8 * h + 2 * k]);
            acc = dot_scaled_16(acc, vsubq_s8(vreinterpretq_s8_u8(u1), four), q8 + 32 * k + 16, sc[8 * h + 2 * k + 1]);
            b0 = vshrq_n_u8(b0, 2);
            b1 = vshrq_n_u8(b1, 2);
            hm0 = vshrq_n_u8(hm0, 1);
            hm1 = vshrq_n_u8(hm1, 1);
        }
    }
    KInts r;
    r.sumi = vaddvq_s32(acc);
    return r;
}

// acc + sc * (32 quants in two 16-byte halves times q8[0..31]), for the 32-element sub-blocks
// of q4_K / q5_K.
inline int32x4_t dot_scaled_32(int32x4_t acc, uint8x16_t q0, uint8x16_t q1, const int8_t* q8, int sc) {
    int32x4_t p = dot_s8(vdupq_n_s32(0), vreinterpretq_s8_u8(q0), vld1q_s8(q8));
    p = dot_s8(p, vreinterpretq_s8_u8(q1), vld1q_s8(q8 + 16));
    return vmlaq_n_s32(acc, p, sc);
}

inline KInts kints_neon(const block_q4_K& b, const block_q8_K& y) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    uint8_t sc[8], mn[8];
    unpack_scales_mins_k4_neon(b.scales, sc, mn);
    int32x4_t acc = vdupq_n_s32(0);
    for (int j = 0; j < 4; j++) {  // 64 elements: sub-block 2j in the low nibbles, 2j + 1 in the high
        const uint8x16_t b0 = vld1q_u8(b.qs + 32 * j), b1 = vld1q_u8(b.qs + 32 * j + 16);
        const int8_t* q8 = y.qs + 64 * j;
        acc = dot_scaled_32(acc, vandq_u8(b0, m4), vandq_u8(b1, m4), q8, sc[2 * j]);
        acc = dot_scaled_32(acc, vshrq_n_u8(b0, 4), vshrq_n_u8(b1, 4), q8 + 32, sc[2 * j + 1]);
    }
    KInts r;
    r.sumi = vaddvq_s32(acc);
    r.summ = mins_dot_bsums_k4_neon(mn, y.bsums);
    return r;
}

inline KInts kints_neon(const block_q5_K& b, const block_q8_K& y) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), one = vdupq_n_u8(1);
    uint8_t sc[8], mn[8];
    unpack_scales_mins_k4_neon(b.scales, sc, mn);
    // qh[l] bit s is the fifth bit of element 32s + l; sub-blocks are taken in order s = 0..7.
    uint8x16_t h0 = vld1q_u8(b.qh), h1 = vld1q_u8(b.qh + 16);
    int32x4_t acc = vdupq_n_s32(0);
    for (int j = 0; j < 4; j++) {
        const uint8x16_t b0 = vld1q_u8(b.qs + 32 * j), b1 = vld1q_u8(b.qs + 32 * j + 16);
        const int8_t* q8 = y.qs + 64 * j;
        const uint8x16_t l0 = vorrq_u8(vandq_u8(b0, m4), vshlq_n_u8(vandq_u8(h0, one), 4));
        const uint8x16_t l1 = vorrq_u8(vandq_u8(b1, m4), vshlq_n_u8(vandq_u8(h1, one), 4));
        h0 = vshrq_n_u8(h0, 1);
        h1 = vshrq_n_u8(h1, 1);
        const uint8x16_t u0 = vorrq_u8(vshrq_n_u8(b0, 4), vshlq_n_u8(vandq_u8(h0, one), 4));
        const uint8x16_t u1 = vorrq_u8(vshrq_n_u8(b1, 4), vshlq_n_u8(vandq_u8(h1, one), 4));
        h0 = vshrq_n_u8(h0, 1);
        h1 = vshrq_n_u8(h1, 1);
        acc = dot_scaled_32(acc, l0, l1, q8, sc[2 * j]);
        acc = dot_scaled_32(acc, u0, u1, q8 + 32, sc[2 * j + 1]);
    }
    KInts r;
    r.sumi = vaddvq_s32(acc);
    r.summ = mins_dot_bsums_k4_neon(mn, y.bsums);
    return r;
}

inline KInts kints_neon(const block_q6_K& b, const block_q8_K& y) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    int32x4_t acc = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++) {  // 128-element halves: 64 bytes of ql, 32 of qh
        const uint8_t* ql = b.ql + 64 * h;
        const uint8x16_t a[4] = {vld1q_u8(ql), vld1q_u8(ql + 16), vld1q_u8(ql + 32), vld1q_u8(ql + 48)};
        uint8x16_t c0 = vld1q_u8(b.qh + 32 * h), c1 = vld1q_u8(b.qh + 32 * h + 16);
        const int8_t* q8 = y.qs + 128 * h;
        for (int k = 0; k < 4; k++) {
            // chunk k (elements 32k..32k+31 of the half): low nibbles of ql bytes 0..31 (k = 0)
            // or 32..63 (k = 1), then their high nibbles (k = 2, 3); bits 2k of qh
            const uint8x16_t l0 = a[2 * (k & 1)], l1 = a[2 * (k & 1) + 1];
            const uint8x16_t n0 = k < 2 ? vandq_u8(l0, m4) : vshrq_n_u8(l0, 4);
            const uint8x16_t n1 = k < 2 ? vandq_u8(l1, m4) : vshrq_n_u8(l1, 4);
            const uint8x16_t u0 = vorrq_u8(n0, vshlq_n_u8(vandq_u8(c0, m3), 4));
            const uint8x16_t u1 = vorrq_u8(n1, vshlq_n_u8(vandq_u8(c1, m3), 4));
            c0 = vshrq_n_u8(c0, 2);
            c1 = vshrq_n_u8(c1, 2);
            acc = dot_scaled_16(acc, vsubq_s8(vreinterpretq_s8_u8(u0), off), q8 + 32 * k, b.scales[8 * h + 2 * k]);
            acc = dot_scaled_16(acc, vsubq_s8(vreinterpretq_s8_u8(u1), off), q8 + 32 * k + 16,
                                b.scales[8 * h + 2 * k + 1]);
        }
    }
    KInts r;
    r.sumi = vaddvq_s32(acc);
    return r;
}

// ---- dot products ----------------------------------------------------------------------------

template <typename B>
constexpr bool kHasMin = !std::is_same<B, block_q3_K>::value && !std::is_same<B, block_q6_K>::value;

template <typename B>
void vec_dot_k_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const B* x = (const B*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const KInts k = kints_neon(x[i], y[i]);
        const float d = y[i].d * h2f(x[i].d);
        if constexpr (kHasMin<B>) {
            const float dmin = y[i].d * h2f(x[i].dmin);
            sumf += std::fma(d, (float)k.sumi, -(dmin * (float)k.summ));
        } else {
            sumf = std::fma(d, (float)k.sumi, sumf);
        }
    }
    *s = sumf;
}

// The entries this file accelerates (dequantization and the Q8_K quantizer stay scalar).
inline void fill_kernels_kquants_neon(KernelTable& t) {
    t.types[TYPE_Q2_K].vec_dot = vec_dot_k_neon<block_q2_K>;
    t.types[TYPE_Q3_K].vec_dot = vec_dot_k_neon<block_q3_K>;
    t.types[TYPE_Q4_K].vec_dot = vec_dot_k_neon<block_q4_K>;
    t.types[TYPE_Q5_K].vec_dot = vec_dot_k_neon<block_q5_K>;
    t.types[TYPE_Q6_K].vec_dot = vec_dot_k_neon<block_q6_K>;
}

}  // namespace
}  // namespace ei
