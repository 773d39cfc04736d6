// NEON dot products of the 1-bit i-quants (IQ1_S, IQ1_M) and the ternary types (TQ1_0, TQ2_0)
// against Q8_K, for the NEON unit (neon.cpp, built with -march=armv8.2-a+dotprod+fp16).
//
// The integers: each super-block's exact sums (grid or digit values times activations by SDOT, or
// by the widening fallback of dot_s8 without dotprod; |sums| < 2^24, so any lane split gives the
// same integers and their conversions to float are exact). The floats: ggml-cpu's ARM vec_dots
// (arch/arm/quants.c, its __ARM_NEON paths) sum one term per super-block, which GCC 12 contracts
// for AArch64 (-O3 -std=gnu11 -march=armv8.2-a+dotprod+fp16; read from the assembly of that file
// built so):
//   TQ1_0, TQ2_0: sumf = fma((float)sum((t - 1) * q), d_x * d_y, sumf)
//   IQ1_S, IQ1_M: t = fma((float)sum_delta, 1/8, (float)sum), sumf = fma(d_y * d_x, t, sumf)
// (sum_delta: sum s * sign * q, the delta's part). These are the scalar references' expressions
// (quant/ref_iq1_tq.cpp) as GCC contracts them when it builds them for AArch64, so the two agree
// bit for bit there; native/tests/kernel_test.cpp reports it.
#pragma once
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "cpu/arm/quants_neon.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/iq1_grids.h"

namespace ei {
namespace {

// ---- the ternary types ----

// The top base-3 digit (3q) >> 8 of each byte q, minus 1: ((q + q / 2) / 2) >> 6 is (3q) >> 8 for
// every byte (checked over all 256 values).
inline int8x16_t top_trit_minus1(uint8x16_t q) {
    const uint8x16_t t = vshrq_n_u8(vhaddq_u8(q, vshrq_n_u8(q, 1)), 6);
    return vsubq_s8(vreinterpretq_s8_u8(t), vdupq_n_s8(1));
}

void vec_dot_tq1_0_q8_K_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_tq1_0* x = (const block_tq1_0*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    static const uint8_t kQhPow3[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    const uint8x16_t qh_pow3 = vld1q_u8(kQhPow3);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t* q = y[i].qs;
        int32x4_t acc = vdupq_n_s32(0);
        // qs[0..31]: digit k of byte m is element 32k + m; qs[32..47]: of byte 32 + m, element
        // 160 + 16k + m. A byte times 3^k (mod 256) brings digit k to the top.
        uint8x16_t a = vld1q_u8(x[i].qs), b = vld1q_u8(x[i].qs + 16), c = vld1q_u8(x[i].qs + 32);
        for (int k = 0; k < 5; k++) {
            acc = dot_s8(acc, top_trit_minus1(a), vld1q_s8(q + 32 * k));
            acc = dot_s8(acc, top_trit_minus1(b), vld1q_s8(q + 32 * k + 16));
            acc = dot_s8(acc, top_trit_minus1(c), vld1q_s8(q + 160 + 16 * k));
            a = vmulq_u8(a, vdupq_n_u8(3));
            b = vmulq_u8(b, vdupq_n_u8(3));
            c = vmulq_u8(c, vdupq_n_u8(3));
        }
        // qh[0..3]: digit k of byte m is element 240 + 4k + m, so byte 4k + m of qh[m] * 3^k.
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, sizeof qh);
        const uint8x16_t h = vmulq_u8(vreinterpretq_u8_u32(vdupq_n_u32(qh)), qh_pow3);
        acc = dot_s8(acc, top_trit_minus1(h), vld1q_s8(q + 240));
        sumf = std::fma((float)vaddvq_s32(acc), h2f(x[i].d) * y[i].d, sumf);
    }
    *s = sumf;
}

void vec_dot_tq2_0_q8_K_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_tq2_0* x = (const block_tq2_0*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const uint8x16_t m3 = vdupq_n_u8(3);
    const int8x16_t one = vdupq_n_s8(1);
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int c = 0; c < 2; c++) {  // bits 2l..2l+1 of qs[32c + m]: element 128c + 32l + m
            uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * c), b1 = vld1q_u8(x[i].qs + 32 * c + 16);
            const int8_t* q = y[i].qs + 128 * c;
            for (int l = 0; l < 4; l++, b0 = vshrq_n_u8(b0, 2), b1 = vshrq_n_u8(b1, 2)) {
                acc = dot_s8(acc, vsubq_s8(vreinterpretq_s8_u8(vandq_u8(b0, m3)), one), vld1q_s8(q + 32 * l));
                acc = dot_s8(acc, vsubq_s8(vreinterpretq_s8_u8(vandq_u8(b1, m3)), one), vld1q_s8(q + 32 * l + 16));
            }
        }
        sumf = std::fma((float)vaddvq_s32(acc), h2f(x[i].d) * y[i].d, sumf);
    }
    *s = sumf;
}

// ---- the 1-bit i-quants ----

// The 16 grid values of two groups (indices a, b), group a in bytes 0..7.
inline int8x16_t iq1_pair(int a, int b) {
    return vcombine_s8(vld1_s8((const int8_t*)&kIq1sGrid[a]), vld1_s8((const int8_t*)&kIq1sGrid[b]));
}

void vec_dot_iq1_s_q8_K_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq1_s* x = (const block_iq1_s*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0, sum_delta = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const uint8_t* qs = x[i].qs + 4 * ib;
            const unsigned qh = x[i].qh[ib];
            const int8x16_t g01 = iq1_pair(qs[0] | (qh << 8 & 0x700), qs[1] | (qh << 5 & 0x700));
            const int8x16_t g23 = iq1_pair(qs[2] | (qh << 2 & 0x700), qs[3] | (qh >> 1 & 0x700));
            const int ls = 2 * (qh >> 12 & 7) + 1;
            sum += ls * dot_block_32(g01, g23, y[i].qs + 32 * ib);
            sum_delta += (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]) * (qh & 0x8000 ? -ls : ls);
        }
        const float t = std::fma((float)sum_delta, kIq1Delta, (float)sum);
        sumf = std::fma(y[i].d * h2f(x[i].d), t, sumf);
    }
    *s = sumf;
}

void vec_dot_iq1_m_q8_K_neon(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq1_m* x = (const block_iq1_m*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t sc[4];
        std::memcpy(sc, x[i].scales, sizeof sc);
        const uint16_t d16 = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        int sum = 0, sum_delta = 0;
        for (int k = 0; k < QK_K / 16; k++) {  // half sub-block k: groups 2k, 2k + 1, one byte of qh
            const unsigned h = x[i].qh[k];
            const int8x16_t g = iq1_pair(x[i].qs[2 * k] | (h << 8 & 0x700), x[i].qs[2 * k + 1] | (h << 4 & 0x700));
            const int8x16_t sign = vcombine_s8(vdup_n_s8(h & 0x08 ? -1 : 1), vdup_n_s8(h & 0x80 ? -1 : 1));
            const int8x16_t q = vld1q_s8(y[i].qs + 16 * k);
            const int ls = 2 * ((sc[k / 4] >> 3 * (k % 4)) & 7) + 1;
            sum += ls * vaddvq_s32(dot_s8(vdupq_n_s32(0), g, q));
            sum_delta += ls * vaddvq_s32(dot_s8(vdupq_n_s32(0), sign, q));
        }
        const float t = std::fma((float)sum_delta, kIq1Delta, (float)sum);
        sumf = std::fma(y[i].d * h2f(d16), t, sumf);
    }
    *s = sumf;
}

// Dequantization stays the scalar reference's.
inline void fill_kernels_iq1_tq_neon(KernelTable& t) {
    t.types[TYPE_IQ1_S].vec_dot = vec_dot_iq1_s_q8_K_neon;
    t.types[TYPE_IQ1_M].vec_dot = vec_dot_iq1_m_q8_K_neon;
    t.types[TYPE_TQ1_0].vec_dot = vec_dot_tq1_0_q8_K_neon;
    t.types[TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_neon;
}

}  // namespace
}  // namespace ei
