// 256-bit x86 kernels of the 32-element block types and the float types, shared by the AVX2
// unit (avx2.cpp) and the AVX-512 unit (avx512.cpp), each of which compiles this file with its
// own flags.
//
// What is computed, and why this shape: the dot products are ggml-cpu's x86 ones
// (ggml/src/ggml-cpu/arch/x86/quants.c), operation for operation, so that the float results
// are bit-identical to llama.cpp on x86, not just close. Per 32-element block the 32 int8
// products are summed pairwise twice into 8 int32 lanes (maddubs + madd, or one VNNI dpbusd
// when the unit is built with AVX-512 VNNI: the same exact integers), converted to float and
// accumulated lane-wise with one FMA by d_x * d_y; the 8 lanes are summed at the end
// (hsum_float_8). The minimum term of q4_1/q5_1 (m_x * s_y) is summed in a separate scalar,
// added last; that `summs += m * s` is an FMA in llama.cpp's builds (gnu11 with GCC, or clang,
// both contract it when FMA is enabled), so it is an explicit std::fma here. The scalar
// reference (quant/ref_legacy.cpp) has the same integer sums and differs only in float
// summation order (tests bound it at 1e-5 of sum |x_i * y_i|).
//
// The q8 activation quantizers are ggml-cpu's quantize_row_q8_0 / quantize_row_q8_1 (AVX2 path)
// and produce the same bytes as the scalar reference.
//
// Everything is in an anonymous namespace: each ISA unit gets its own copy, compiled with its
// own flags, and the linker can never substitute one unit's copy for another's.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "common/fp16_table.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// ---- primitives ----------------------------------------------------------------------------

inline float hsum_float_8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

inline int hsum_i32_8(__m256i a) {
    const __m128i s128 = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    const __m128i s64 = _mm_add_epi32(_mm_unpackhi_epi64(s128, s128), s128);
    return _mm_cvtsi128_si32(_mm_add_epi32(s64, _mm_shuffle_epi32(s64, _MM_SHUFFLE(2, 3, 0, 1))));
}

// 16 bytes of nibbles -> 32 bytes in [0, 15]: low nibbles in bytes 0..15, high in 16..31.
inline __m256i bytes_from_nibbles_32(const uint8_t* p) {
    const __m128i tmp = _mm_loadu_si128((const __m128i*)p);
    const __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
    return _mm256_and_si256(bytes, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set, 0x00 where not.
inline __m256i bytes_from_bits_32(const uint8_t* p) {
    uint32_t x32;
    std::memcpy(&x32, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// 8 int32 lanes, each the sum of 4 adjacent products ax[i] * sy[i] (ax unsigned, sy signed),
// as float. Exact: |sums| stay far below 2^24 for 4-, 5- and 8-bit quants.
inline __m256 mul_sum_us8_pairs_float(__m256i ax, __m256i sy) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy));
#else
    const __m256i dot16 = _mm256_maddubs_epi16(ax, sy);  // no saturation: |pair| <= 2*128*127
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot16));
#endif
}

// Signed x signed: move x's sign onto y so the unsigned-by-signed multiply applies.
inline __m256 mul_sum_i8_pairs_float(__m256i x, __m256i y) {
    return mul_sum_us8_pairs_float(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// Half -> float: the table (common/fp16_table.h says why not F16C's VCVTPH2PS here); exact.
inline float h2f(uint16_t h) { return fp16_to_fp32_lookup(h); }

inline __m256 set1_fp16_product(uint16_t a, uint16_t b) { return _mm256_set1_ps(h2f(a) * h2f(b)); }

// ---- activation quantizers -----------------------------------------------------------------

// One block of 32 floats -> 32 int8 (round half to even of x * 127 / amax); returns d = amax / 127
// and, through *isum, the sum of the int8 values.
inline float quantize_block_q8_256(const float* x, int8_t* qs, int* isum) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_andnot_ps(sign, v0);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v1));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v2));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float max_scalar = _mm_cvtss_f32(m4);

    const float d = max_scalar / 127.0f;
    const __m256 mul = _mm256_set1_ps(max_scalar != 0.0f ? 127.0f / max_scalar : 0.0f);
    const int mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), mode));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), mode));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), mode));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), mode));
    *isum = hsum_i32_8(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));

    // int32 -> int16 -> int8 with saturation; the packs work per 128-bit lane, so the
    // 32-bit groups come out as 0 2 4 6 1 3 5 7 and are put back in order.
    const __m256i p16a = _mm256_packs_epi32(i0, i1);
    const __m256i p16b = _mm256_packs_epi32(i2, i3);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    const __m256i ordered = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i*)qs, ordered);
    return d;
}

void from_float_q8_0_256(const float* src, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int isum;
        y[i].d = fp32_to_fp16(quantize_block_q8_256(src + i * QK8_0, y[i].qs, &isum));
    }
}

void from_float_q8_1_256(const float* src, void* dst, int64_t n) {
    block_q8_1* y = (block_q8_1*)dst;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int isum;
        const float d = quantize_block_q8_256(src + i * QK8_1, y[i].qs, &isum);
        y[i].d = fp32_to_fp16(d);
        y[i].s = fp32_to_fp16(d * (float)isum);
    }
}

// ---- quantized dot products ----------------------------------------------------------------

void vec_dot_q4_0_q8_0_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_0* x = (const block_q4_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256 d = set1_fp16_product(x[i].d, y[i].d);
        const __m256i qx = _mm256_sub_epi8(bytes_from_nibbles_32(x[i].qs), _mm256_set1_epi8(8));
        const __m256i qy = _mm256_loadu_si256((const __m256i*)y[i].qs);
        acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
    }
    *s = hsum_float_8(acc);
}

void vec_dot_q4_1_q8_1_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_1* x = (const block_q4_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        summs = std::fma(h2f(x[i].m), h2f(y[i].s), summs);
        const __m256 d = set1_fp16_product(x[i].d, y[i].d);
        const __m256i qx = bytes_from_nibbles_32(x[i].qs);
        const __m256i qy = _mm256_loadu_si256((const __m256i*)y[i].qs);
        acc = _mm256_fmadd_ps(d, mul_sum_us8_pairs_float(qx, qy), acc);
    }
    *s = hsum_float_8(acc) + summs;
}

void vec_dot_q5_0_q8_0_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_0* x = (const block_q5_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256 d = set1_fp16_product(x[i].d, y[i].d);
        // q - 16 = nibble | (fifth bit clear ? 0xF0 : 0) as int8
        const __m256i hi = _mm256_andnot_si256(bytes_from_bits_32(x[i].qh), _mm256_set1_epi8((char)0xF0));
        const __m256i qx = _mm256_or_si256(bytes_from_nibbles_32(x[i].qs), hi);
        const __m256i qy = _mm256_loadu_si256((const __m256i*)y[i].qs);
        acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
    }
    *s = hsum_float_8(acc);
}

void vec_dot_q5_1_q8_1_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_1* x = (const block_q5_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        summs = std::fma(h2f(x[i].m), h2f(y[i].s), summs);
        const __m256 dx = _mm256_set1_ps(h2f(x[i].d));
        const __m256 dy = _mm256_set1_ps(h2f(y[i].d));
        const __m256i hi = _mm256_and_si256(bytes_from_bits_32(x[i].qh), _mm256_set1_epi8(0x10));
        const __m256i qx = _mm256_or_si256(bytes_from_nibbles_32(x[i].qs), hi);
        const __m256i qy = _mm256_loadu_si256((const __m256i*)y[i].qs);
        acc = _mm256_fmadd_ps(mul_sum_us8_pairs_float(qx, qy), _mm256_mul_ps(dx, dy), acc);
    }
    *s = hsum_float_8(acc) + summs;
}

void vec_dot_q8_0_q8_0_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q8_0* x = (const block_q8_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256 d = set1_fp16_product(x[i].d, y[i].d);
        const __m256i qx = _mm256_loadu_si256((const __m256i*)x[i].qs);
        const __m256i qy = _mm256_loadu_si256((const __m256i*)y[i].qs);
        acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
    }
    *s = hsum_float_8(acc);
}

// ---- several activation rows at once (decode batches) -------------------------------------
// The dot products above for NC activation rows: each weight block is loaded and unpacked once,
// then every column goes through exactly its vec_dot's operations (same integers, same float
// products, FMAs and reduction, in the same order), so each result is bit-identical to vec_dot's.

// The 32 weight values of a block as int8 (signed types) or u8 (q4_1 / q5_1), as the vec_dots unpack them.
inline __m256i unpack_q4_0(const block_q4_0& b) { return _mm256_sub_epi8(bytes_from_nibbles_32(b.qs), _mm256_set1_epi8(8)); }
inline __m256i unpack_q5_0(const block_q5_0& b) {
    const __m256i hi = _mm256_andnot_si256(bytes_from_bits_32(b.qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(bytes_from_nibbles_32(b.qs), hi);
}
inline __m256i unpack_q8_0(const block_q8_0& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
inline __m256i unpack_q4_1(const block_q4_1& b) { return bytes_from_nibbles_32(b.qs); }
inline __m256i unpack_q5_1(const block_q5_1& b) {
    const __m256i hi = _mm256_and_si256(bytes_from_bits_32(b.qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(bytes_from_nibbles_32(b.qs), hi);
}

// Signed weights against q8_0 activations (q4_0, q5_0, q8_0).
template <int NC, typename Block, __m256i (*Unpack)(const Block&)>
void dot_cols_signed_256(int64_t n, float* s, size_t s_stride, const void* vx, const void* vy, size_t y_stride) {
    const Block* x = (const Block*)vx;
    const uint8_t* y0 = (const uint8_t*)vy;
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256i qx = Unpack(x[i]);
        for (int c = 0; c < NC; ++c) {
            const block_q8_0& y = ((const block_q8_0*)(y0 + c * y_stride))[i];
            const __m256 d = set1_fp16_product(x[i].d, y.d);
            acc[c] = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, _mm256_loadu_si256((const __m256i*)y.qs)), acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) s[c * s_stride] = hsum_float_8(acc[c]);
}

// Unsigned weights with a minimum against q8_1 activations (q4_1, q5_1). q5_1's vec_dot scales by
// dx * dy as a vector product and q4_1's by the scalar product: the same rounded float either way.
template <int NC, typename Block, __m256i (*Unpack)(const Block&)>
void dot_cols_min_256(int64_t n, float* s, size_t s_stride, const void* vx, const void* vy, size_t y_stride) {
    const Block* x = (const Block*)vx;
    const uint8_t* y0 = (const uint8_t*)vy;
    __m256 acc[NC];
    float summs[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps(), summs[c] = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const __m256i qx = Unpack(x[i]);
        const float m = h2f(x[i].m);
        for (int c = 0; c < NC; ++c) {
            const block_q8_1& y = ((const block_q8_1*)(y0 + c * y_stride))[i];
            summs[c] = std::fma(m, h2f(y.s), summs[c]);
            const __m256 d = set1_fp16_product(x[i].d, y.d);
            acc[c] = _mm256_fmadd_ps(d, mul_sum_us8_pairs_float(qx, _mm256_loadu_si256((const __m256i*)y.qs)), acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) s[c * s_stride] = hsum_float_8(acc[c]) + summs[c];
}

// gemm_small_batch from a kernel templated on the column count: each weight row against every
// activation row (in passes of kSmallBatchMax), the next rows requested ahead as matmul's decode does.
template <template <int> class K>
void gemm_small_batch_256(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                          size_t a_stride, float* y, int64_t ldy) {
    constexpr size_t kPrefetchBytes = 4096, kLine = 64;
    const uint8_t* wb = (const uint8_t*)w;
    const uint8_t* end = wb + m * w_stride;
    for (int64_t c0 = 0; c0 < n; c0 += kSmallBatchMax) {
        const int64_t nc = std::min<int64_t>(kSmallBatchMax, n - c0);
        const uint8_t* ac = (const uint8_t*)a + c0 * a_stride;
        for (int64_t r = 0; r < m; ++r) {
            const uint8_t* row = wb + r * w_stride;
            for (const uint8_t* p = row + kPrefetchBytes; p < std::min(row + w_stride + kPrefetchBytes, end); p += kLine)
                __builtin_prefetch(p, 0, 3);
            float* yr = y + c0 * ldy + r;
            switch (nc) {
                case 1: K<1>::run(k, yr, ldy, row, ac, a_stride); break;
                case 2: K<2>::run(k, yr, ldy, row, ac, a_stride); break;
                case 3: K<3>::run(k, yr, ldy, row, ac, a_stride); break;
                case 4: K<4>::run(k, yr, ldy, row, ac, a_stride); break;
                case 5: K<5>::run(k, yr, ldy, row, ac, a_stride); break;
                case 6: K<6>::run(k, yr, ldy, row, ac, a_stride); break;
                case 7: K<7>::run(k, yr, ldy, row, ac, a_stride); break;
                default: K<8>::run(k, yr, ldy, row, ac, a_stride); break;
            }
        }
    }
}
static_assert(kSmallBatchMax == 8, "gemm_small_batch_256 lists the column counts 1..8");

template <int NC> struct ColsQ4_0 { static constexpr auto run = dot_cols_signed_256<NC, block_q4_0, unpack_q4_0>; };
template <int NC> struct ColsQ5_0 { static constexpr auto run = dot_cols_signed_256<NC, block_q5_0, unpack_q5_0>; };
template <int NC> struct ColsQ8_0 { static constexpr auto run = dot_cols_signed_256<NC, block_q8_0, unpack_q8_0>; };
template <int NC> struct ColsQ4_1 { static constexpr auto run = dot_cols_min_256<NC, block_q4_1, unpack_q4_1>; };
template <int NC> struct ColsQ5_1 { static constexpr auto run = dot_cols_min_256<NC, block_q5_1, unpack_q5_1>; };

// ---- float types ---------------------------------------------------------------------------
// As ggml_vec_dot_f32/f16 with 256-bit vectors: four 8-lane FMA accumulators over steps of 32,
// reduced pairwise, the tail (n % 32) summed in double.

inline float reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    return hsum_float_8(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
}

inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

void vec_dot_f32_256(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = (const float*)vx;
    const float* y = (const float*)vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int64_t np = n & ~(int64_t)31;
    for (int64_t i = 0; i < np; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    double sum = reduce4(a0, a1, a2, a3);
    for (int64_t i = np; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

void vec_dot_f16_256(int64_t n, float* s, const void* vx, const void* vy) {
    const uint16_t* x = (const uint16_t*)vx;
    const uint16_t* y = (const uint16_t*)vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int64_t np = n & ~(int64_t)31;
    for (int64_t i = 0; i < np; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(x + i + 8), load_f16x8(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(x + i + 16), load_f16x8(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(x + i + 24), load_f16x8(y + i + 24), a3);
    }
    double sum = reduce4(a0, a1, a2, a3);
    for (int64_t i = np; i < n; i++) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
    *s = (float)sum;
}

// F16 <-> F32 rows with F16C (exact one way, round-to-nearest-even the other, as the scalar).
void to_float_f16_256(const void* src, float* dst, int64_t n) {
    const uint16_t* x = (const uint16_t*)src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(x + i));
    for (; i < n; i++) dst[i] = fp16_to_fp32(x[i]);
}

void from_float_f16_256(const float* src, void* dst, int64_t n) {
    uint16_t* y = (uint16_t*)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = fp32_to_fp16(src[i]);
}

// The entries this file accelerates; the rest of the table stays as the caller filled it.
inline void fill_kernels_256(KernelTable& t) {
    t.types[TYPE_F32].vec_dot = vec_dot_f32_256;
    t.types[TYPE_F16].to_float = to_float_f16_256;
    t.types[TYPE_F16].from_float = from_float_f16_256;
    t.types[TYPE_F16].vec_dot = vec_dot_f16_256;
    t.types[TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_256;
    t.types[TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_256;
    t.types[TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_256;
    t.types[TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1_256;
    t.types[TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_256;
    t.types[TYPE_Q4_0].gemm_small_batch = gemm_small_batch_256<ColsQ4_0>;
    t.types[TYPE_Q4_1].gemm_small_batch = gemm_small_batch_256<ColsQ4_1>;
    t.types[TYPE_Q5_0].gemm_small_batch = gemm_small_batch_256<ColsQ5_0>;
    t.types[TYPE_Q5_1].gemm_small_batch = gemm_small_batch_256<ColsQ5_1>;
    t.types[TYPE_Q8_0].gemm_small_batch = gemm_small_batch_256<ColsQ8_0>;
    t.types[TYPE_Q8_0].from_float = from_float_q8_0_256;
    t.types[TYPE_Q8_1].from_float = from_float_q8_1_256;
}

}  // namespace
}  // namespace ei
