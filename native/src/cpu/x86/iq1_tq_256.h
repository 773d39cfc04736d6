// 256-bit x86 dot products of the 1-bit i-quants (IQ1_S, IQ1_M) and the ternary types (TQ1_0,
// TQ2_0) against Q8_K, shared by the AVX2 and AVX-512 units as iquants_256.h is.
//
// ggml-cpu's x86 vec_dots have an AVX2 path for all four and no 512-bit one, so an AVX-512 build of
// llama.cpp runs the AVX2 code too. The integers are exact wherever they are formed, so only where
// each partial sum sits (which of 8 int32 lanes) and the float steps matter, and those are ggml's:
//   TQ1_0, TQ2_0: per super-block, lane k holds sum (t * q) over the elements at byte positions
//     4k..4k+3 of their 32-byte slices (t the stored digit 0..2), minus bsums[2k] + bsums[2k + 1]
//     (which makes it sum((t - 1) * q) in total); acc = fma(float(lanes), d_y * d_x, acc), then
//     hsum_float_8. ggml writes add(mul(...), acc); its -march=native build on this Zen 4 (GCC)
//     contracts that into VFMADD231PS (read from the disassembly of its libggml-cpu.so).
//   IQ1_S: lane k holds sum over sub-blocks of s * (g . q) at byte positions 4k..4k+3; per super-block
//     acc = fma(d, float(lanes), acc) (ggml's explicit _mm256_fmadd_ps) and, in scalar, the delta
//     term acc_delta = fma(d, float(sum s * sign * bsums), acc_delta) (contracted by GCC: VFMADD231SS);
//     the result hsum_float_8(acc) + 1/8 * acc_delta, the product rounded apart (VMULSS, VADDSS).
//   IQ1_M: two lane accumulators, of s * (g . q) and of s * sign * q (the scale of the half
//     sub-block: lanes 0..3 the first 16 elements, 4..7 the last 16); per super-block both FMA'd by
//     d = d_y * d_x; the result fma(hsum(acc_delta), 1/8, hsum(acc)) (VFMADD132SS in ggml's build).
// For batches of 8 rows and more llama.cpp multiplies IQ1_S and IQ1_M (not TQ1_0, TQ2_0) with
// ggml-cpu's tiled GEMM instead (tiled.cpp; x86 only), whose order vec_dot_ggml_tiled gives: per
// super-block the exact 8 sumi + delta from the same lanes, r = (float)isum * (d_x / 8),
// acc = fma(r, d_y, acc) (quant/ref_iq1_tq.cpp).
// tests/test_iq1_tq.py compares each with that library's vec_dot bit for bit. Activations must be
// what a Q8_K quantizer writes (no -128: the sign trick of the byte products would wrap it, in
// ggml's code as in this).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "cpu/kernels.h"
#include "cpu/x86/iquants_256.h"
#include "cpu/x86/quants_256.h"
#include "quant/blocks.h"
#include "quant/iq1_grids.h"

namespace ei {
namespace {

// ---- the ternary types ----

// Bytes times 3 and 9, modulo 256 (AVX2 has no byte multiply; the 16-bit shift's carries out of
// each low byte are masked off).
inline __m256i bytes_times3(__m256i x) { return _mm256_add_epi8(x, _mm256_add_epi8(x, x)); }
inline __m256i bytes_times9(__m256i x) {
    return _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(x, 3), _mm256_set1_epi8((char)0xF8)), x);
}
inline __m128i bytes_times3(__m128i x) { return _mm_add_epi8(x, _mm_add_epi8(x, x)); }
inline __m128i bytes_times9(__m128i x) {
    return _mm_add_epi8(_mm_and_si128(_mm_slli_epi16(x, 3), _mm_set1_epi8((char)0xF8)), x);
}

// The top base-3 digit (3q) >> 8 of each byte q, in 0..2, from byte averages (no byte multiply):
// with p = max(q - 1, 0), avg(p, avg(p, 0)) >> 6 is it for every q (checked over all 256 values).
inline __m256i top_trit(__m256i q) {
    const __m256i p = _mm256_subs_epu8(q, _mm256_set1_epi8(1));
    const __m256i r = _mm256_avg_epu8(p, _mm256_avg_epu8(p, _mm256_setzero_si256()));
    return _mm256_and_si256(_mm256_srli_epi16(r, 6), _mm256_set1_epi8(3));
}

// sum(t * q) of 32 digits t (0..2) and activations q, in 16 int16 lanes of adjacent pairs.
inline __m256i trit_dot(__m256i t, const int8_t* q) {
    return _mm256_maddubs_epi16(t, _mm256_loadu_si256((const __m256i*)q));
}

// The int16 lanes of a super-block (minus the activations' group sums) into ggml's accumulator.
inline __m256 ternary_accumulate(__m256i sum16, const block_q8_K& y, uint16_t d_x, __m256 acc) {
    sum16 = _mm256_sub_epi16(sum16, _mm256_loadu_si256((const __m256i*)y.bsums));
    const __m256i lanes = _mm256_madd_epi16(sum16, _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(y.d * h2f(d_x)), acc);
}

void vec_dot_tq1_0_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_tq1_0* x = (const block_tq1_0*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const int8_t* q = y[i].qs;
        // qs[0..31]: digit k of byte m is element 32k + m; a byte times 3^k brings digit k to the top.
        const __m256i b1 = _mm256_loadu_si256((const __m256i*)x[i].qs);
        const __m256i b3 = bytes_times3(b1), b9 = bytes_times9(b1);
        const __m256i b27 = bytes_times9(b3), b81 = bytes_times9(b9);
        __m256i sum = _mm256_add_epi16(trit_dot(top_trit(b1), q), trit_dot(top_trit(b3), q + 32));
        sum = _mm256_add_epi16(sum, _mm256_add_epi16(trit_dot(top_trit(b9), q + 64), trit_dot(top_trit(b27), q + 96)));
        sum = _mm256_add_epi16(sum, trit_dot(top_trit(b81), q + 128));
        // qs[32..47] (elements 160 + 16k + m) and qh[0..3] (elements 240 + 4k + m), as 32-byte slices
        // of elements 160.., 192.., 224..: [x | 3x], [9x | 27x], [81x | qh[m] * 3^k at byte 4k + m].
        const __m128i c1 = _mm_loadu_si128((const __m128i*)(x[i].qs + 32));
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, sizeof qh);
        const __m128i h1 = _mm_set1_epi32((int)qh), h3 = bytes_times3(h1), h9 = bytes_times9(h1);
        const __m128i h = _mm_blend_epi32(_mm_blend_epi32(h1, h3, 0x2), _mm_blend_epi32(h9, bytes_times3(h9), 0x8), 0xC);
        const __m256i c13 = _mm256_set_m128i(bytes_times3(c1), c1);
        const __m256i c927 = bytes_times9(c13);
        const __m256i c81h = _mm256_set_m128i(h, bytes_times9(bytes_times9(c1)));
        sum = _mm256_add_epi16(sum, trit_dot(top_trit(c13), q + 160));
        sum = _mm256_add_epi16(sum, trit_dot(top_trit(c927), q + 192));
        sum = _mm256_add_epi16(sum, trit_dot(top_trit(c81h), q + 224));
        acc = ternary_accumulate(sum, y[i], x[i].d, acc);
    }
    *s = hsum_float_8(acc);
}

void vec_dot_tq2_0_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_tq2_0* x = (const block_tq2_0*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        __m256i sum = _mm256_setzero_si256();
        for (int c = 0; c < 2; ++c) {  // bits 2l..2l+1 of qs[32c + m]: element 128c + 32l + m
            const __m256i b = _mm256_loadu_si256((const __m256i*)(x[i].qs + 32 * c));
            const int8_t* q = y[i].qs + 128 * c;
            sum = _mm256_add_epi16(sum, _mm256_add_epi16(trit_dot(_mm256_and_si256(b, m3), q),
                                                         trit_dot(_mm256_and_si256(_mm256_srli_epi16(b, 2), m3), q + 32)));
            sum = _mm256_add_epi16(sum, _mm256_add_epi16(trit_dot(_mm256_and_si256(_mm256_srli_epi16(b, 4), m3), q + 64),
                                                         trit_dot(_mm256_and_si256(_mm256_srli_epi16(b, 6), m3), q + 96)));
        }
        acc = ternary_accumulate(sum, y[i], x[i].d, acc);
    }
    *s = hsum_float_8(acc);
}

// ---- the 1-bit i-quants ----

// The 32 grid values of four groups (indices a..d), group l in bytes 8l..8l+7.
inline __m256i iq1_groups(int a, int b, int c, int d) {
    return _mm256_set_epi64x((long long)kIq1sGrid[d], (long long)kIq1sGrid[c], (long long)kIq1sGrid[b],
                             (long long)kIq1sGrid[a]);
}

// A super-block's integers in ggml's x86 lanes: `sum` of s * (g . q) (the header's lanes), and the
// delta sums (IQ1_S: one scalar in lane 0; IQ1_M: lanes of s * sign * q).
struct Iq1Lanes {
    __m256i sum, delta;
};

inline Iq1Lanes iq1_lanes(const block_iq1_s& x, const block_q8_K& y) {
    __m256i sum = _mm256_setzero_si256();
    int sum_delta = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
        const uint8_t* qs = x.qs + 4 * ib;
        const unsigned qh = x.qh[ib];
        const __m256i g = iq1_groups(qs[0] | (qh << 8 & 0x700), qs[1] | (qh << 5 & 0x700), qs[2] | (qh << 2 & 0x700),
                                     qs[3] | (qh >> 1 & 0x700));
        const int ls = 2 * (qh >> 12 & 7) + 1;
        sum = _mm256_add_epi32(sum, dot_i8_lanes_scaled(g, _mm256_loadu_si256((const __m256i*)(y.qs + 32 * ib)), ls));
        sum_delta += (y.bsums[2 * ib] + y.bsums[2 * ib + 1]) * (qh & 0x8000 ? -ls : ls);
    }
    return {sum, _mm256_setr_epi32(sum_delta, 0, 0, 0, 0, 0, 0, 0)};
}

inline uint16_t iq1_m_d16(const block_iq1_m& x) {
    uint16_t sc[4];
    std::memcpy(sc, x.scales, sizeof sc);
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

inline Iq1Lanes iq1_lanes(const block_iq1_m& x, const block_q8_K& y) {
    const __m256i one8 = _mm256_set1_epi8(1);
    uint16_t sc[4];
    std::memcpy(sc, x.scales, sizeof sc);
    __m256i sum = _mm256_setzero_si256(), sum_delta = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ++ib) {
        const uint8_t* qs = x.qs + 4 * ib;
        const unsigned h0 = x.qh[2 * ib], h1 = x.qh[2 * ib + 1];
        const __m256i g = iq1_groups(qs[0] | (h0 << 8 & 0x700), qs[1] | (h0 << 4 & 0x700), qs[2] | (h1 << 8 & 0x700),
                                     qs[3] | (h1 << 4 & 0x700));
        // +1 or -1 per group of 8, by the sign bits 3 and 7 of the group pair's byte.
        const __m256i sign = _mm256_or_si256(one8, _mm256_set_epi64x(h1 & 0x80 ? -1 : 0, h1 & 0x08 ? -1 : 0,
                                                                      h0 & 0x80 ? -1 : 0, h0 & 0x08 ? -1 : 0));
        const unsigned w = sc[ib / 2] >> 6 * (ib % 2);
        const int16_t ls0 = (int16_t)(2 * (w & 7) + 1), ls1 = (int16_t)(2 * (w >> 3 & 7) + 1);
        const __m256i ls = _mm256_set_m128i(_mm_set1_epi16(ls1), _mm_set1_epi16(ls0));
        const __m256i q = _mm256_loadu_si256((const __m256i*)(y.qs + 32 * ib));
        const __m256i dot = _mm256_maddubs_epi16(_mm256_sign_epi8(g, g), _mm256_sign_epi8(q, g));
        const __m256i qsum = _mm256_maddubs_epi16(one8, _mm256_sign_epi8(q, sign));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(dot, ls));
        sum_delta = _mm256_add_epi32(sum_delta, _mm256_madd_epi16(qsum, ls));
    }
    return {sum, sum_delta};
}

inline float iq1_d(const block_iq1_s& x) { return h2f(x.d); }
inline float iq1_d(const block_iq1_m& x) { return h2f(iq1_m_d16(x)); }

void vec_dot_iq1_s_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq1_s* x = (const block_iq1_s*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps();
    float acc_delta = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const Iq1Lanes b = iq1_lanes(x[i], y[i]);
        const float d = y[i].d * iq1_d(x[i]);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(b.sum), acc);
        acc_delta = std::fma(d, (float)_mm256_cvtsi256_si32(b.delta), acc_delta);
    }
    float delta = kIq1Delta * acc_delta;
    __asm__("" : "+x"(delta));  // rounded before the add, as ggml's build computes it (no FMA)
    *s = hsum_float_8(acc) + delta;
}

void vec_dot_iq1_m_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq1_m* x = (const block_iq1_m*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps(), acc_delta = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const Iq1Lanes b = iq1_lanes(x[i], y[i]);
        const __m256 d = _mm256_set1_ps(y[i].d * iq1_d(x[i]));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(b.sum), acc);
        acc_delta = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(b.delta), acc_delta);
    }
    *s = std::fma(hsum_float_8(acc_delta), kIq1Delta, hsum_float_8(acc));
}

// ggml's tiled GEMM order (the header): the exact 8 sumi + delta, times d_x / 8, one FMA by d_y.
template <class Block>
void vec_dot_iq1_tiled_256(int64_t n, float* s, const void* vx, const void* vy) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const Iq1Lanes b = iq1_lanes(x[i], y[i]);
        const int isum = 8 * hsum_i32_8(b.sum) + hsum_i32_8(b.delta);
        acc = std::fma((float)isum * (iq1_d(x[i]) * 0.125f), y[i].d, acc);
    }
    *s = acc;
}

void vec_dot_iq1_s_q8_K_tiled_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq1_tiled_256<block_iq1_s>(n, s, x, y);
}
void vec_dot_iq1_m_q8_K_tiled_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq1_tiled_256<block_iq1_m>(n, s, x, y);
}

// Dequantization stays the scalar reference's.
inline void fill_kernels_iq1_tq_256(KernelTable& t) {
    t.types[TYPE_IQ1_S].vec_dot = vec_dot_iq1_s_q8_K_256;
    t.types[TYPE_IQ1_M].vec_dot = vec_dot_iq1_m_q8_K_256;
    t.types[TYPE_IQ1_S].vec_dot_ggml_tiled = vec_dot_iq1_s_q8_K_tiled_256;
    t.types[TYPE_IQ1_M].vec_dot_ggml_tiled = vec_dot_iq1_m_q8_K_tiled_256;
    t.types[TYPE_TQ1_0].vec_dot = vec_dot_tq1_0_q8_K_256;
    t.types[TYPE_TQ2_0].vec_dot = vec_dot_tq2_0_q8_K_256;
}

}  // namespace
}  // namespace ei
