// Float-op pieces shared by the x86 ISA units that have FMA (ops_avx2.cpp, ops_avx512.cpp),
// compiled into each with that unit's flags (anonymous namespace: one private copy per unit).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "cpu/gelu_table.h"

namespace ei {
namespace {

// The tail of ggml_vec_soft_max_f32 after its vector loop: libm's expf for y[i..n), each value
// added to the double sum in turn; returns the sum.
inline double soft_max_tail(int64_t i, int64_t n, const float* x, float max, float* y, double sum) {
    for (; i < n; ++i) {
        const float v = std::exp(x[i] - max);
        sum += (double)v;
        y[i] = v;
    }
    return sum;
}

// ggml's rotate_pairs (normal mode) as GCC compiles it with FMA and -ffp-contract=fast (ggml's
// C++ is built as gnu++17, where contraction is on): the loop is SLP-vectorized into
// vfmaddsub, which fuses the products with x0 and rounds the products with x1 separately:
//   y0 = fma(x0, cos, -(x1*sin)),  y1 = fma(x0, sin, x1*cos).
// That holds for whole vectors of pairs; GCC's short tail (fewer than 4 pairs) is left
// unfused (vmulps + vaddsubps), so it is here too. n_rot = 64/128/256 has no tail.
void rope_rotate_fma(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                     const float* cs) {
    const int64_t n_fused = n_rot & ~int64_t(7);  // whole groups of 4 pairs
    for (int64_t h = 0; h < n_heads; ++h) {
        const float* x = src + h * head_dim;
        float* y = dst + h * head_dim;
        int64_t i0 = 0;
        for (; i0 < n_fused; i0 += 2) {
            const float c = cs[i0], s = cs[i0 + 1];
            const float x0 = x[i0], x1 = x[i0 + 1];
            y[i0] = std::fma(x0, c, -(x1 * s));
            y[i0 + 1] = std::fma(x0, s, x1 * c);
        }
        for (; i0 < n_rot; i0 += 2) {
            const float c = cs[i0], s = cs[i0 + 1];
            const float x0 = x[i0], x1 = x[i0 + 1];
            const float a = x0 * c, b = x1 * s, e = x0 * s, f = x1 * c;
            y[i0] = a - b;
            y[i0 + 1] = e + f;
        }
        for (int64_t i = n_rot; i < head_dim; ++i) y[i] = x[i];
    }
}

// rotate_pairs for neox mode (n_offset = n_rot/2) as GCC compiles it with FMA: the loop is
// loop-vectorized (the two outputs are n_rot/2 apart, so there is no SLP pairing), and
// contraction fuses the first product of each expression, the one with x0, rounding the other:
//   y[i] = fma(x0, cos, -(x1*sin)),  y[i + n_rot/2] = fma(x0, sin, x1*cos)
// for every element, tails included (scalar epilogues are contracted the same way).
void rope_rotate_neox_fma(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                          const float* cs) {
    const int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
        const float* x = src + h * head_dim;
        float* y = dst + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float x0 = x[i], x1 = x[i + half];
            y[i] = std::fma(x0, c, -(x1 * s));
            y[i + half] = std::fma(x0, s, x1 * c);
        }
        for (int64_t i = n_rot; i < head_dim; ++i) y[i] = x[i];
    }
}

// ggml_vec_geglu_f32 is the same scalar table loop in every x86 build; only the table differs
// (its inner term is fused on FMA targets). Eight elements at a time here, with the same bits:
// VCVTPS2PH rounds to nearest even as fp32_to_fp16 does, a gather reads the table entries, and
// the same one product per element (GEGLU runs on the calling thread alone, so a scalar loop with
// a branch per element shows in Gemma 3's decode).
void geglu_fma(int64_t n, const float* gate, const float* up, float* out) {
    const uint16_t* table = gelu_f16_table<true>();
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    const __m256i low16 = _mm256_set1_epi32(0xFFFF);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
        const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        // Entry and the next in each lane (the table has one entry of padding): keep the low half.
        const __m256i entries = _mm256_and_si256(
            _mm256_i32gather_epi32(reinterpret_cast<const int*>(table), idx, 2), low16);
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(entries), _mm256_extracti128_si256(entries, 1));
        __m256 y = _mm256_mul_ps(_mm256_cvtph_ps(packed), u);
        y = _mm256_blendv_ps(y, _mm256_mul_ps(x, u), _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        y = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), y);
        _mm256_storeu_ps(out + i, y);
    }
    geglu_with_table(table, n - i, gate + i, up + i, out + i);
}

}  // namespace
}  // namespace ei
