// 256-bit x86 dot products of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) with Q8_K
// activations, shared by the AVX2 unit (avx2.cpp) and the AVX-512 unit (avx512.cpp), each of
// which compiles this file with its own flags.
//
// What must match llama.cpp, and what may not differ: these are ggml-cpu's x86 kernels
// (ggml/src/ggml-cpu/arch/x86/quants.c, ggml_vec_dot_qN_K_q8_K, the __AVX2__ branch, which is
// also the one a -march=native build takes on AVX-512 machines: there is no AVX-512 branch),
// reproduced float operation for float operation so that the results are bit-identical:
//
//  * Integers. Per 32 activations the products are summed pairwise twice (maddubs, then madd
//    against the int16 sub-block scales), so int32 lane k of the accumulator `sumi` holds the
//    scaled products of the elements whose index mod 32 is 4k..4k+3, summed over the whole
//    super-block. Those 8 integers are exact (no int16 saturation: |q| <= 63, |q8| <= 127), so
//    any instruction sequence giving the same lane contents gives the same floats; the lane
//    assignment itself is what must not change. Q6_K's exception: its -32 offset is not in the
//    products (q stays unsigned 0..63) but subtracted per super-block from the Q8_K block sums,
//    madd(scales, bsums) << 5, so lane k also carries the offsets of sub-blocks 2k and 2k+1
//    (elements 32k..32k+31) - the same total, different lanes, hence different floats.
//  * Floats, per super-block: acc = fma(d_y * d_x, float(sumi), acc) lane-wise (8 lanes), and
//    the minimum term in the type's own place:
//      q2_K: acc = fma(-d_y * dmin_x, float(m[2k] bsum[2k] + m[2k+1] bsum[2k+1]), acc), first;
//      q4_K: acc_m (4 lanes) = fma(-d_y * dmin_x, float(m[2k] (b[4k] + b[4k+1]) + m[2k+1] (...)), acc_m);
//      q5_K: summs = fma(-d_y * dmin_x, float(sum of all those), summs), a scalar: ggml writes
//            `summs += dmin * int`, which GCC 12 -O3 with FMA contracts into one vfmadd231ss
//            (checked on the generated code); here it is an explicit std::fma.
//    At the end: hsum_float_8(acc), plus ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])) for
//    q4_K or summs for q5_K.
// Nothing else here may be contracted: every product is either an explicit fmadd or a value
// that is not added to anything.
//
// The Q8_K activations: ggml-cpu on x86 quantizes them with its reference code; from_float_q8_K_256
// below gives the same bytes 8 floats at a time.
//
// Everything is in an anonymous namespace, like quants_256.h (whose primitives this reuses).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "cpu/kernels.h"
#include "cpu/x86/quants_256.h"
#include "quant/blocks.h"

namespace ei {
namespace {

inline int sum_i32_4(__m128i a) {
    a = _mm_add_epi32(a, _mm_unpackhi_epi64(a, a));
    return _mm_cvtsi128_si32(_mm_add_epi32(a, _mm_shuffle_epi32(a, 1)));
}

// ---- scale plumbing --------------------------------------------------------------------------

// The int16 scales sc[8h .. 8h+7] of a 16-scale register, in both 128-bit halves (pshufb
// selects within a half).
inline __m256i scales_half(__m256i sc16, int h) {
    return h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00) : _mm256_permute2x128_si256(sc16, sc16, 0x11);
}

// For the 32-element chunk k of a 128-element half whose scales `half` holds (16-element
// sub-blocks): int16 lanes 0..7 (elements 0..15) get scale 2k, lanes 8..15 scale 2k + 1.
inline __m256i scales_pair(__m256i half, int k) {
    const __m256i ctl = _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * k + 1))),
                                         _mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * k))));
    return _mm256_shuffle_epi8(half, ctl);
}

// Scale m of a register holding 8 int16 scales in both halves, in all 16 lanes (32-element
// sub-blocks).
inline __m256i scales_one(__m256i scales, int m) {
    return _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)(0x0100 + 0x0202 * m)));
}

// 32 unsigned quants (< 64) times 32 int8 activations, adjacent pairs summed (int16, exact),
// then times the int16 scales and pairs summed again: 8 int32 lanes of 4 elements each.
inline __m256i dot_scaled(__m256i q, const int8_t* q8, __m256i scales) {
    return _mm256_madd_epi16(scales, _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i*)q8)));
}

// q4_K / q5_K: 8 scales then 8 mins, 6 bits each, unpacked from the 12 packed bytes to 16
// bytes in that order (ggml's get_scale_min_k4 for all sub-blocks at once).
inline __m128i unpack_scales_mins_k4(const uint8_t* packed) {
    uint32_t a[3];
    std::memcpy(a, packed, 12);
    const uint32_t m6 = 0x3f3f3f3f, lo4 = 0x0f0f0f0f, top2 = 0x03030303;
    const uint32_t sc_lo = a[0] & m6;                                          // scales 0..3
    const uint32_t sc_hi = (a[2] & lo4) | (((a[0] >> 6) & top2) << 4);         // scales 4..7
    const uint32_t mn_lo = a[1] & m6;                                          // mins 0..3
    const uint32_t mn_hi = ((a[2] >> 4) & lo4) | (((a[1] >> 6) & top2) << 4);  // mins 4..7
    return _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
}

// q3_K: the 16 6-bit scales minus 32, as int8 (low nibbles in bytes 0..7, top bits in 8..11).
inline __m128i unpack_scales_q3(const uint8_t* packed) {
    uint32_t a[3];
    std::memcpy(a, packed, 12);
    const uint32_t lo4 = 0x0f0f0f0f, top2 = 0x03030303;
    const __m128i sc = _mm_set_epi32((int)(((a[1] >> 4) & lo4) | (((a[2] >> 6) & top2) << 4)),
                                     (int)(((a[0] >> 4) & lo4) | (((a[2] >> 4) & top2) << 4)),
                                     (int)((a[1] & lo4) | (((a[2] >> 2) & top2) << 4)),
                                     (int)((a[0] & lo4) | ((a[2] & top2) << 4)));
    return _mm_sub_epi8(sc, _mm_set1_epi8(32));
}

// m[2k] * (b[4k] + b[4k+1]) + m[2k+1] * (b[4k+2] + b[4k+3]) for k = 0..3: the minimum term of
// q4_K / q5_K (8 mins against the 16 bsums summed pairwise into the 8 32-element sub-blocks).
inline __m128i mins_dot_bsums_k4(__m256i scales_mins, const int16_t* bsums) {
    const __m256i b = _mm256_loadu_si256((const __m256i*)bsums);
    const __m128i b32 = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    return _mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), b32);
}

// ---- dot products ----------------------------------------------------------------------------

// Per super-block integer parts. Lane k of `sumi` holds the scaled products of the elements
// whose index mod 32 is 4k..4k+3 (exact); `mprod` the minimum term's integers. vec_dot turns
// the lanes into floats one by one, the tiled order (below) sums them first.
inline void q2_K_block_ints(const block_q2_K& x, const block_q8_K& y, __m256i* sumi_out, __m256i* mprod) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    // lane k = m[2k] * bsums[2k] + m[2k+1] * bsums[2k+1]
    const __m128i packed = _mm_loadu_si128((const __m128i*)x.scales);
    const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
    *mprod = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i*)y.bsums));

    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_and_si128(packed, m4));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {  // 128-element halves: 32 bytes of 2-bit quants each
        const __m256i half = scales_half(sc16, h);
        const __m256i bits = _mm256_loadu_si256((const __m256i*)(x.qs + 32 * h));
        const int8_t* q8 = y.qs + 128 * h;
        for (int k = 0; k < 4; k++) {  // chunk k: bits 2k..2k+1 of every byte
            const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
            sumi = _mm256_add_epi32(sumi, dot_scaled(q, q8 + 32 * k, scales_pair(half, k)));
        }
    }
    *sumi_out = sumi;
}

void vec_dot_q2_K_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q2_K* x = (const block_q2_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        __m256i sumi, mprod;
        q2_K_block_ints(x[i], y[i], &sumi, &mprod);
        // the minimum term first
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mprod), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_float_8(acc);
}

inline __m256i q3_K_block_ints(const block_q3_K& x, const block_q8_K& y) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i ones = _mm256_set1_epi8(1);
    const __m256i sc16 = _mm256_cvtepi8_epi16(unpack_scales_q3(x.scales));
    const __m256i hbits = _mm256_loadu_si256((const __m256i*)x.hmask);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i half = scales_half(sc16, h);
        const __m256i bits = _mm256_loadu_si256((const __m256i*)(x.qs + 32 * h));
        const int8_t* q8 = y.qs + 128 * h;
        for (int k = 0; k < 4; k++) {
            // q = low - hoff, hoff = 4 where hmask bit (4h + k) is clear: two unsigned
            // products, subtracted in int16 (|each pair| <= 4 * 127 * 2).
            const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
            const __m256i hset = _mm256_and_si256(_mm256_srli_epi16(hbits, 4 * h + k), ones);
            const __m256i hoff = _mm256_slli_epi16(_mm256_xor_si256(hset, ones), 2);
            const __m256i qy = _mm256_loadu_si256((const __m256i*)(q8 + 32 * k));
            const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(low, qy), _mm256_maddubs_epi16(hoff, qy));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scales_pair(half, k), p16));
        }
    }
    return sumi;
}

void vec_dot_q3_K_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q3_K* x = (const block_q3_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * h2f(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q3_K_block_ints(x[i], y[i])), acc);
    }
    *s = hsum_float_8(acc);
}

// A q4_K super-block's weight side, unpacked once (a decode batch applies it to several columns).
struct Q4KWeights {
    __m256i scales_mins;  // 8 scales then 8 mins, int16
    __m256i scales;       // the 8 scales in both halves
    __m256i q[8];         // 32-element chunk 2j: the low nibbles of bytes 32j.., chunk 2j + 1 the high
};

inline Q4KWeights q4_K_unpack(const block_q4_K& x) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    Q4KWeights w;
    w.scales_mins = _mm256_cvtepu8_epi16(unpack_scales_mins_k4(x.scales));
    w.scales = scales_half(w.scales_mins, 0);
    for (int j = 0; j < 4; j++) {  // 64 elements: 32 low nibbles, then 32 high nibbles
        const __m256i bits = _mm256_loadu_si256((const __m256i*)(x.qs + 32 * j));
        w.q[2 * j] = _mm256_and_si256(bits, m4);
        w.q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    }
    return w;
}

inline void q4_K_ints(const Q4KWeights& w, const block_q8_K& y, __m256i* sumi_out, __m128i* mprod) {
    *mprod = mins_dot_bsums_k4(w.scales_mins, y.bsums);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++) sumi = _mm256_add_epi32(sumi, dot_scaled(w.q[c], y.qs + 32 * c, scales_one(w.scales, c)));
    *sumi_out = sumi;
}

inline void q4_K_block_ints(const block_q4_K& x, const block_q8_K& y, __m256i* sumi_out, __m128i* mprod) {
    q4_K_ints(q4_K_unpack(x), y, sumi_out, mprod);
}

void vec_dot_q4_K_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_K* x = (const block_q4_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        __m256i sumi;
        __m128i mprod;
        q4_K_block_ints(x[i], y[i], &sumi, &mprod);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mprod), acc_m);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    *s = hsum_float_8(acc) + _mm_cvtss_f32(acc_m);
}

// ggml_gemv_q4_K_8x8_q8_K / ggml_gemm_q4_K_8x8_q8_K (arch/x86/repack.cpp, __AVX2__ branch), the
// kernels llama.cpp runs on Q4_K weights repacked 8 rows at a time (repack.cpp selects
// q4_K_8x8_q8_K whenever AVX2 is available and the row count is a multiple of 8). Per output
// element they keep whole super-blocks in integers and do two float FMAs a super-block:
//   acc  = fma(float(sum_sub sc * dot(q4, q8)), d_x * d_y, acc)
//   accm = fma(float(sum_sub m * bsum),         dmin_x * d_y, accm)
// and return acc - accm. The integers are vec_dot's lanes summed exactly.
void vec_dot_q4_K_q8_K_repacked_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_K* x = (const block_q4_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float acc = 0.0f, acc_m = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi;
        __m128i mprod;
        q4_K_block_ints(x[i], y[i], &sumi, &mprod);
        acc = std::fma((float)hsum_i32_8(sumi), h2f(x[i].d) * y[i].d, acc);
        acc_m = std::fma((float)sum_i32_4(mprod), h2f(x[i].dmin) * y[i].d, acc_m);
    }
    *s = acc - acc_m;
}

// The GEMM of the same repacked kernels (ggml_gemm_q4_K_8x8_q8_K, AVX2 and AVX-512 branches),
// which llama.cpp runs on the activation rows in whole groups of 4 (the last n % 4 rows go
// through the GEMV above). It does the two float FMAs once per pair of sub-blocks (64
// elements, four times a super-block) instead of once per super-block:
//   acc  = fma(float(sc_2j * dot_2j + sc_2j+1 * dot_2j+1), d_x * d_y, acc)
//   accm = fma(float(m_2j * bsum_2j + m_2j+1 * bsum_2j+1), dmin_x * d_y, accm)
void vec_dot_q4_K_q8_K_repacked_gemm_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_K* x = (const block_q4_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    float acc = 0.0f, acc_m = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i scales_mins = _mm256_cvtepu8_epi16(unpack_scales_mins_k4(x[i].scales));
        alignas(16) int32_t imin[4];  // lane j: the mins of sub-blocks 2j, 2j + 1 times their bsums
        _mm_store_si128((__m128i*)imin, mins_dot_bsums_k4(scales_mins, y[i].bsums));
        const __m256i scales = scales_half(scales_mins, 0);
        const float d = h2f(x[i].d) * y[i].d;
        const float dmin = h2f(x[i].dmin) * y[i].d;
        for (int j = 0; j < 4; j++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i*)(x[i].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i sumi = _mm256_add_epi32(dot_scaled(lo, y[i].qs + 64 * j, scales_one(scales, 2 * j)),
                                                  dot_scaled(hi, y[i].qs + 64 * j + 32, scales_one(scales, 2 * j + 1)));
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sumi), _mm256_extracti128_si256(sumi, 1));
            const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            const int isum = _mm_cvtsi128_si32(s2) + _mm_extract_epi32(s2, 1);
            acc = std::fma((float)isum, d, acc);
            acc_m = std::fma((float)imin[j], dmin, acc_m);
        }
    }
    *s = acc - acc_m;
}

inline void q5_K_block_ints(const block_q5_K& x, const block_q8_K& y, __m256i* sumi_out, __m128i* mprod) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi8(1);
    const __m256i scales_mins = _mm256_cvtepu8_epi16(unpack_scales_mins_k4(x.scales));
    *mprod = mins_dot_bsums_k4(scales_mins, y.bsums);
    const __m256i scales = scales_half(scales_mins, 0);
    const __m256i hbits = _mm256_loadu_si256((const __m256i*)x.qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i*)(x.qs + 32 * j));
        // fifth bit of sub-block 2j (2j + 1) is bit 2j (2j + 1) of qh, moved to bit 4
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), ones), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), ones), 4);
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), h0);
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), h1);
        sumi = _mm256_add_epi32(sumi, dot_scaled(lo, y.qs + 64 * j, scales_one(scales, 2 * j)));
        sumi = _mm256_add_epi32(sumi, dot_scaled(hi, y.qs + 64 * j + 32, scales_one(scales, 2 * j + 1)));
    }
    *sumi_out = sumi;
}

void vec_dot_q5_K_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_K* x = (const block_q5_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * h2f(x[i].d);
        const float dmin = -y[i].d * h2f(x[i].dmin);
        __m256i sumi;
        __m128i mprod;
        q5_K_block_ints(x[i], y[i], &sumi, &mprod);
        summs = std::fma(dmin, (float)sum_i32_4(mprod), summs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_float_8(acc) + summs;
}

// A q6_K super-block's weight side, unpacked once (a decode batch applies it to several columns).
struct Q6KWeights {
    __m256i sc16;      // the 16 scales, int16
    __m256i scale[8];  // chunk 4h + k's scale pair (scales_pair)
    __m256i q[8];      // chunk 4h + k's 32 values, 0..63
};

inline Q6KWeights q6_K_unpack(const block_q6_K& x) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m3 = _mm256_set1_epi8(3);
    Q6KWeights w;
    w.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)x.scales));
    for (int h = 0; h < 2; h++) {
        const __m256i half = scales_half(w.sc16, h);
        const __m256i lo1 = _mm256_loadu_si256((const __m256i*)(x.ql + 64 * h));
        const __m256i lo2 = _mm256_loadu_si256((const __m256i*)(x.ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i*)(x.qh + 32 * h));
        // chunk k: low nibbles of lo1, lo2, then high nibbles; top 2 bits from bits 2k of hb
        const __m256i q[4] = {
            _mm256_and_si256(lo1, m4),
            _mm256_and_si256(lo2, m4),
            _mm256_and_si256(_mm256_srli_epi16(lo1, 4), m4),
            _mm256_and_si256(_mm256_srli_epi16(lo2, 4), m4),
        };
        for (int k = 0; k < 4; k++) {
            const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m3), 4);
            w.q[4 * h + k] = _mm256_or_si256(q[k], top);
            w.scale[4 * h + k] = scales_pair(half, k);
        }
    }
    return w;
}

inline __m256i q6_K_ints(const Q6KWeights& w, const block_q8_K& y) {
    // The -32 offset, per 16-element sub-block from the activation block sums: int32 lane k
    // gets 32 * (sc[2k] bsums[2k] + sc[2k+1] bsums[2k+1]) (ggml: madd(scales, bsums) << 5,
    // subtracted once per super-block), not the per-element offsets of the lane's products.
    const __m256i offs = _mm256_slli_epi32(_mm256_madd_epi16(w.sc16, _mm256_loadu_si256((const __m256i*)y.bsums)), 5);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i*)(y.qs + 32 * c));
        // q * q8 with q unsigned (0..63), pairwise in int16 (|pair| <= 63 * 127 * 2)
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(w.scale[c], _mm256_maddubs_epi16(w.q[c], qy)));
    }
    return _mm256_sub_epi32(sumi, offs);
}

inline __m256i q6_K_block_ints(const block_q6_K& x, const block_q8_K& y) { return q6_K_ints(q6_K_unpack(x), y); }

void vec_dot_q6_K_q8_K_256(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q6_K* x = (const block_q6_K*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * h2f(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q6_K_block_ints(x[i], y[i])), acc);
    }
    *s = hsum_float_8(acc);
}

// ggml-cpu's tiled k-quant GEMM (tiled.cpp / tiled-kernel.cpp), which llama.cpp runs on k-quant
// weights that are not repacked whenever the batch has at least 8 activation rows. Per output
// element and super-block it keeps the whole integer sum exact, then rounds once per
// super-block in its own order (the VNNI microtile's epilogue, its add contracted into an FMA):
//   r   = float(sumi) * d_x                    (q3_K, q6_K)
//   r   = fma(-dmin_x, float(summ), float(sumi) * d_x)   (q2_K, q4_K, q5_K)
//   acc = fma(r, d_y, acc)
// The whole super-block's integers for the tiled order: {sum_sub(sc * dot), sum_sub(m * bsum)}.
struct TiledInts {
    int sumi, summ;
};
inline TiledInts tiled_ints(const block_q2_K& x, const block_q8_K& y) {
    __m256i sumi, mprod;
    q2_K_block_ints(x, y, &sumi, &mprod);
    return {hsum_i32_8(sumi), hsum_i32_8(mprod)};
}
inline TiledInts tiled_ints(const block_q3_K& x, const block_q8_K& y) { return {hsum_i32_8(q3_K_block_ints(x, y)), 0}; }
inline TiledInts tiled_ints(const block_q4_K& x, const block_q8_K& y) {
    __m256i sumi;
    __m128i mprod;
    q4_K_block_ints(x, y, &sumi, &mprod);
    return {hsum_i32_8(sumi), sum_i32_4(mprod)};
}
inline TiledInts tiled_ints(const block_q5_K& x, const block_q8_K& y) {
    __m256i sumi;
    __m128i mprod;
    q5_K_block_ints(x, y, &sumi, &mprod);
    return {hsum_i32_8(sumi), sum_i32_4(mprod)};
}
inline TiledInts tiled_ints(const block_q6_K& x, const block_q8_K& y) { return {hsum_i32_8(q6_K_block_ints(x, y)), 0}; }

inline float dmin_of(const block_q2_K& x) { return h2f(x.dmin); }
inline float dmin_of(const block_q3_K&) { return 0.0f; }
inline float dmin_of(const block_q4_K& x) { return h2f(x.dmin); }
inline float dmin_of(const block_q5_K& x) { return h2f(x.dmin); }
inline float dmin_of(const block_q6_K&) { return 0.0f; }

template <typename B>
void vec_dot_tiled_256(int64_t n, float* s, const void* vx, const void* vy) {
    const B* x = (const B*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const TiledInts k = tiled_ints(x[i], y[i]);
        // without a minimum the inner FMA adds -0 * 0: exact, r unchanged
        const float r = std::fma(-dmin_of(x[i]), (float)k.summ, (float)k.sumi * h2f(x[i].d));
        acc = std::fma(r, y[i].d, acc);
    }
    *s = acc;
}

// ---- decode batches: several activation rows per weight row ---------------------------------
// The q6_K vec_dot and the q4_K repacked GEMV for NC columns: each super-block's weights unpacked
// once (Q6KWeights, Q4KWeights), each column's integers and floats exactly its own call's.

template <int NC>
void q6_K_cols_256(int64_t n, float* s, size_t s_stride, const void* vx, const void* vy, size_t y_stride) {
    const block_q6_K* x = (const block_q6_K*)vx;
    const uint8_t* y0 = (const uint8_t*)vy;
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const Q6KWeights w = q6_K_unpack(x[i]);
        const float dx = h2f(x[i].d);
        for (int c = 0; c < NC; ++c) {
            const block_q8_K& y = ((const block_q8_K*)(y0 + c * y_stride))[i];
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * dx), _mm256_cvtepi32_ps(q6_K_ints(w, y)), acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) s[c * s_stride] = hsum_float_8(acc[c]);
}

template <int NC>
void q4_K_repacked_cols_256(int64_t n, float* s, size_t s_stride, const void* vx, const void* vy, size_t y_stride) {
    const block_q4_K* x = (const block_q4_K*)vx;
    const uint8_t* y0 = (const uint8_t*)vy;
    float acc[NC], acc_m[NC];
    for (int c = 0; c < NC; ++c) acc[c] = acc_m[c] = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const Q4KWeights w = q4_K_unpack(x[i]);
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int c = 0; c < NC; ++c) {
            const block_q8_K& y = ((const block_q8_K*)(y0 + c * y_stride))[i];
            __m256i sumi;
            __m128i mprod;
            q4_K_ints(w, y, &sumi, &mprod);
            acc[c] = std::fma((float)hsum_i32_8(sumi), d * y.d, acc[c]);
            acc_m[c] = std::fma((float)sum_i32_4(mprod), dmin * y.d, acc_m[c]);
        }
    }
    for (int c = 0; c < NC; ++c) s[c * s_stride] = acc[c] - acc_m[c];
}

template <int NC> struct ColsQ6_K { static constexpr auto run = q6_K_cols_256<NC>; };
template <int NC> struct ColsQ4_KRepacked { static constexpr auto run = q4_K_repacked_cols_256<NC>; };

// The entries this file accelerates (dequantization and the Q8_K quantizer stay scalar: ggml's
// x86 quantize_row_q8_K is the scalar reference too).
// ref::from_float_q8_K's bytes (ggml's quantize_row_q8_K_ref): per 256 values, the first value of
// the largest magnitude sets iscale = -127 / it; each value becomes nearest_int(iscale * x) capped
// at 127, 16-value sums go to bsums, d = 1 / iscale. The magnitude search, the products and the
// sums are exact whatever the order; VCVTPS2DQ rounds half to even as ggml's nearest_int does
// (for |v| < 2^22); the division and the reciprocal are the same scalar operations.
void from_float_q8_K_256(const float* src, void* dst, int64_t n) {
    constexpr int kVecs = QK_K / 8;
    block_q8_K* y = (block_q8_K*)dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int v = 0; v < kVecs; ++v) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(src + 8 * v)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        int first = 0;
        for (int v = 0; v < kVecs; ++v) {
            const __m256 ax = _mm256_andnot_ps(sign, _mm256_loadu_ps(src + 8 * v));
            const int hits = _mm256_movemask_ps(_mm256_cmp_ps(ax, _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hits) {
                first = 8 * v + __builtin_ctz(hits);
                break;
            }
        }
        const float iscale = -127.0f / src[first];
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i cap = _mm256_set1_epi32(127);
        for (int g = 0; g < QK_K / 16; ++g) {
            const __m256i a = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(src + 16 * g))), cap);
            const __m256i b = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(src + 16 * g + 8))), cap);
            // int32 -> int16 -> int8 with saturation (no value is outside [-128, 127] here), in order
            const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
            const __m128i x = _mm_packs_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
            _mm_storeu_si128((__m128i*)(y[i].qs + 16 * g), _mm_packs_epi16(w, x));
            y[i].bsums[g] = (int16_t)hsum_i32_8(_mm256_add_epi32(a, b));
        }
        y[i].d = 1.0f / iscale;
    }
}

inline void fill_kernels_kquants_256(KernelTable& t) {
    t.types[TYPE_Q8_K].from_float = from_float_q8_K_256;
    t.types[TYPE_Q2_K].vec_dot = vec_dot_q2_K_q8_K_256;
    t.types[TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K_256;
    t.types[TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K_256;
    t.types[TYPE_Q4_K].vec_dot_ggml_repack = vec_dot_q4_K_q8_K_repacked_256;
    t.types[TYPE_Q4_K].vec_dot_ggml_repack_gemm = vec_dot_q4_K_q8_K_repacked_gemm_256;
    t.types[TYPE_Q4_K].gemm_small_batch_ggml_repack = gemm_small_batch_256<ColsQ4_KRepacked>;
    t.types[TYPE_Q6_K].gemm_small_batch = gemm_small_batch_256<ColsQ6_K>;
    t.types[TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K_256;
    t.types[TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K_256;
    t.types[TYPE_Q2_K].vec_dot_ggml_tiled = vec_dot_tiled_256<block_q2_K>;
    t.types[TYPE_Q3_K].vec_dot_ggml_tiled = vec_dot_tiled_256<block_q3_K>;
    t.types[TYPE_Q4_K].vec_dot_ggml_tiled = vec_dot_tiled_256<block_q4_K>;
    t.types[TYPE_Q5_K].vec_dot_ggml_tiled = vec_dot_tiled_256<block_q5_K>;
    t.types[TYPE_Q6_K].vec_dot_ggml_tiled = vec_dot_tiled_256<block_q6_K>;
}

}  // namespace
}  // namespace ei
