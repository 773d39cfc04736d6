// 256-bit x86 dot products of the 2- and 3-bit lattice i-quants (IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S) against Q8_K, shared by the AVX2 and AVX-512 units as iquants_256.h is.
//
// ggml-cpu's x86 vec_dots of these five (ggml/src/ggml-cpu/arch/x86/quants.c) have an AVX2 path
// and no 512-bit one, so a -march=native build on an AVX-512 machine runs the AVX2 code too; both
// tables here run this file. Their float order is one and the same for the five:
//   per super-block, 8 int32 lanes, lane k the exact sum over the 8 sub-blocks of
//     (2 ls + 1) * (sum of the 4 products of elements 4k..4k+3 of the sub-block)
//   (ls the 4-bit scale of the half the elements are in); then
//     acc[k] = fma(d_x * d_y, (float)lane[k], acc[k]),
//   and at the end s = c * hsum_float_8(acc), c = 1/8 (IQ2_*), 1/4 (IQ3_XXS), 1 (IQ3_S).
// The lanes are what a sub-block of 32 bytes in element order gives with PMADDUBSW (unsigned grid
// magnitudes times sign-flipped activations, adjacent pairs) and PMADDWD (times the 16-bit scale,
// adjacent pairs again), which is how ggml computes them; being exact, the way they are summed
// does not matter (a pair is at most 2 * 62 * 127 < 2^15, so PMADDUBSW never saturates). All
// float operations are explicit intrinsics, so no compiler contraction choice enters: the results
// are ggml's bits (tests/test_iq23.py compares with the llama.cpp build's libggml-cpu.so).
// The scalar references (quant/ref_iq23.cpp) have the same integers per super-block and differ
// from these by float order only. Dequantization stays the reference's (one product per element).
//
// For batches of 8 rows and more llama.cpp multiplies these weights with ggml-cpu's tiled GEMM
// instead (tiled.cpp; x86 only), whose order vec_dot_ggml_tiled gives: per super-block the same
// integer, summed whole, r = (float)sum * (d_x * c), acc = fma(r, d_y, acc) (ref_iq23.cpp).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "cpu/kernels.h"
#include "cpu/x86/quants_256.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"

namespace ei {
namespace {

// One sub-block of 32 as the dot product wants it: the grid magnitudes (unsigned bytes, element
// order), a byte of +1 / -1 per element for its sign, and the 16-bit scale 2 ls + 1 of each half
// (elements 0..15 in the low 128 bits, 16..31 in the high ones).
struct Iq23Sub {
    __m256i mag, sign, scale;
};

inline uint32_t iq23_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// 32 explicit sign bits (bit j: element j, little-endian) as bytes +1 / -1.
inline __m256i iq23_sign_bits_32(uint32_t bits) {
    const __m256i byte_of = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                             3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i spread = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), byte_of), bit);
    return _mm256_or_si256(_mm256_cmpeq_epi8(spread, bit), _mm256_set1_epi8(1));
}

// The sign bytes of 4 groups of 8 whose 7-bit codes sit at bits 0, 7, 14, 21 of `codes`.
inline __m256i iq23_even_signs_4(uint32_t codes) {
    const uint64_t* ones = kIqSigns.ones;
    return _mm256_set_epi64x((long long)ones[codes >> 21 & 127], (long long)ones[codes >> 14 & 127],
                             (long long)ones[codes >> 7 & 127], (long long)ones[codes & 127]);
}

inline __m256i iq23_scales(int ls_lo, int ls_hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)(2 * ls_hi + 1)), _mm_set1_epi16((short)(2 * ls_lo + 1)));
}

inline Iq23Sub iq23_sub(const block_iq2_xxs& b, int ib) {
    const uint32_t idx = iq23_u32(b.qs + 4 * ib), meta = iq23_u32(b.qs + 4 * ib + 2);
    const __m256i mag = _mm256_set_epi64x((long long)kIq2xxsGrid[idx >> 24], (long long)kIq2xxsGrid[idx >> 16 & 255],
                                          (long long)kIq2xxsGrid[idx >> 8 & 255], (long long)kIq2xxsGrid[idx & 255]);
    return {mag, iq23_even_signs_4(meta), _mm256_set1_epi16((short)(2 * (meta >> 28) + 1))};
}

inline Iq23Sub iq23_sub(const block_iq2_xs& b, int ib) {
    const uint16_t* q = b.qs + 4 * ib;
    const uint64_t* ones = kIqSigns.ones;
    const __m256i mag = _mm256_set_epi64x((long long)kIq2xsGrid[q[3] & 511], (long long)kIq2xsGrid[q[2] & 511],
                                          (long long)kIq2xsGrid[q[1] & 511], (long long)kIq2xsGrid[q[0] & 511]);
    const __m256i sign = _mm256_set_epi64x((long long)ones[q[3] >> 9], (long long)ones[q[2] >> 9],
                                           (long long)ones[q[1] >> 9], (long long)ones[q[0] >> 9]);
    return {mag, sign, iq23_scales(b.scales[ib] & 15, b.scales[ib] >> 4)};
}

inline Iq23Sub iq23_sub(const block_iq2_s& b, int ib) {
    const uint8_t* q = b.qs + 4 * ib;
    const unsigned h = b.qh[ib];
    const __m256i mag = _mm256_set_epi64x(
        (long long)kIq2sGrid[q[3] | (h << 2 & 0x300)], (long long)kIq2sGrid[q[2] | (h << 4 & 0x300)],
        (long long)kIq2sGrid[q[1] | (h << 6 & 0x300)], (long long)kIq2sGrid[q[0] | (h << 8 & 0x300)]);
    return {mag, iq23_sign_bits_32(iq23_u32(b.qs + QK_K / 8 + 4 * ib)), iq23_scales(b.scales[ib] & 15, b.scales[ib] >> 4)};
}

inline Iq23Sub iq23_sub(const block_iq3_xxs& b, int ib) {
    const uint8_t* q = b.qs + 8 * ib;
    const __m256i mag = _mm256_set_epi32((int)kIq3xxsGrid[q[7]], (int)kIq3xxsGrid[q[6]], (int)kIq3xxsGrid[q[5]],
                                         (int)kIq3xxsGrid[q[4]], (int)kIq3xxsGrid[q[3]], (int)kIq3xxsGrid[q[2]],
                                         (int)kIq3xxsGrid[q[1]], (int)kIq3xxsGrid[q[0]]);
    const uint32_t meta = iq23_u32(b.qs + QK_K / 4 + 4 * ib);
    return {mag, iq23_even_signs_4(meta), _mm256_set1_epi16((short)(2 * (meta >> 28) + 1))};
}

inline Iq23Sub iq23_sub(const block_iq3_s& b, int ib) {
    const uint8_t* q = b.qs + 8 * ib;
    const unsigned h = b.qh[ib];
    auto point = [&](int k) { return (int)kIq3sGrid[q[k] | (h >> k & 1) << 8]; };
    const __m256i mag =
        _mm256_set_epi32(point(7), point(6), point(5), point(4), point(3), point(2), point(1), point(0));
    const int ls = b.scales[ib / 2] >> 4 * (ib % 2) & 15;
    return {mag, iq23_sign_bits_32(iq23_u32(b.signs + 4 * ib)), _mm256_set1_epi16((short)(2 * ls + 1))};
}

// A super-block's 8 int32 lanes (the header's lane k).
template <class Block>
inline __m256i iq23_lanes(const Block& x, const block_q8_K& y) {
    __m256i lanes = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ++ib) {
        const Iq23Sub sub = iq23_sub(x, ib);
        const __m256i q8 = _mm256_loadu_si256((const __m256i*)(y.qs + 32 * ib));
        const __m256i pairs = _mm256_maddubs_epi16(sub.mag, _mm256_sign_epi8(q8, sub.sign));
        lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(pairs, sub.scale));
    }
    return lanes;
}

// ggml's x86 float order for all five (the header); c as there.
template <class Block>
void vec_dot_iq23_256(int64_t n, float* s, const void* vx, const void* vy, float c) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[i].d), _mm256_cvtepi32_ps(iq23_lanes(x[i], y[i])), acc);
    *s = c * hsum_float_8(acc);
}

// The tiled GEMM's order (the header).
template <class Block>
void vec_dot_iq23_tiled_256(int64_t n, float* s, const void* vx, const void* vy, float c) {
    const Block* x = (const Block*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float r = (float)hsum_i32_8(iq23_lanes(x[i], y[i])) * (h2f(x[i].d) * c);
        acc = std::fma(r, y[i].d, acc);
    }
    *s = acc;
}

void vec_dot_iq2_xxs_q8_K_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_256<block_iq2_xxs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_xs_q8_K_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_256<block_iq2_xs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_s_q8_K_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_256<block_iq2_s>(n, s, x, y, 0.125f);
}
void vec_dot_iq3_xxs_q8_K_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_256<block_iq3_xxs>(n, s, x, y, 0.25f);
}
void vec_dot_iq3_s_q8_K_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_256<block_iq3_s>(n, s, x, y, 1.0f);
}

void vec_dot_iq2_xxs_q8_K_tiled_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled_256<block_iq2_xxs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_xs_q8_K_tiled_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled_256<block_iq2_xs>(n, s, x, y, 0.125f);
}
void vec_dot_iq2_s_q8_K_tiled_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled_256<block_iq2_s>(n, s, x, y, 0.125f);
}
void vec_dot_iq3_xxs_q8_K_tiled_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled_256<block_iq3_xxs>(n, s, x, y, 0.25f);
}
void vec_dot_iq3_s_q8_K_tiled_256(int64_t n, float* s, const void* x, const void* y) {
    vec_dot_iq23_tiled_256<block_iq3_s>(n, s, x, y, 1.0f);
}

inline void fill_kernels_iq23_256(KernelTable& t) {
    const struct {
        uint32_t type;
        VecDotFn vec_dot, tiled;
    } kernels[] = {
        {TYPE_IQ2_XXS, vec_dot_iq2_xxs_q8_K_256, vec_dot_iq2_xxs_q8_K_tiled_256},
        {TYPE_IQ2_XS, vec_dot_iq2_xs_q8_K_256, vec_dot_iq2_xs_q8_K_tiled_256},
        {TYPE_IQ2_S, vec_dot_iq2_s_q8_K_256, vec_dot_iq2_s_q8_K_tiled_256},
        {TYPE_IQ3_XXS, vec_dot_iq3_xxs_q8_K_256, vec_dot_iq3_xxs_q8_K_tiled_256},
        {TYPE_IQ3_S, vec_dot_iq3_s_q8_K_256, vec_dot_iq3_s_q8_K_tiled_256},
    };
    for (const auto& k : kernels) {
        t.types[k.type].vec_dot = k.vec_dot;
        t.types[k.type].vec_dot_ggml_tiled = k.tiled;
    }
}

}  // namespace
}  // namespace ei
