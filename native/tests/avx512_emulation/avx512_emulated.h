// Force-included (g++ -include) into the AVX-512 units when they are built for a machine without
// AVX-512 (scripts/test_avx512_emulated.sh): their _mm512_* intrinsics become SIMDe's portable
// ones (libsimde-dev), which run on AVX2 halves, so the units' results can be checked for
// exactness on any AVX2 CPU. Not for speed: a build made this way is a test build only.
//
// SIMDe decides what is native when it is included, before the __AVX512*__ macros below are
// defined; the macros then steer the project's headers onto their AVX-512 paths, as -mavx512f
// and -mavx512vnni -mavx512vl would.
#pragma once

#if defined(__AVX512F__)
#error "avx512_emulated.h is for builds without -mavx512f"
#endif

#include <immintrin.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <cstdint>
#include <cstring>

// SIMDe 0.7.4's alias for _mm512_madd_epi16 takes the masked form's four arguments.
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)

// What SIMDe 0.7.4 lacks, written from the intrinsics' definitions (Intel's guide) on AVX2
// halves; the reductions follow GCC's avx512fintrin.h lane order, which the units' results carry.
namespace avx512_emulated {

inline __m256 lo(simde__m512 a) { return simde__m512_to_private(a).m256[0]; }
inline __m256 hi(simde__m512 a) { return simde__m512_to_private(a).m256[1]; }

inline simde__m512 join(__m256 l, __m256 h) {
    simde__m512_private r;
    r.m256[0] = l;
    r.m256[1] = h;
    return simde__m512_from_private(r);
}

inline simde__m512i join_i(__m256i l, __m256i h) {
    simde__m512i_private r;
    r.m256i[0] = l;
    r.m256i[1] = h;
    return simde__m512i_from_private(r);
}

inline simde__m512 cvtepi32_ps(simde__m512i a) {
    const simde__m512i_private p = simde__m512i_to_private(a);
    return join(_mm256_cvtepi32_ps(p.m256i[0]), _mm256_cvtepi32_ps(p.m256i[1]));
}

inline simde__m512i cvtepi8_epi32(__m128i a) {
    return join_i(_mm256_cvtepi8_epi32(a), _mm256_cvtepi8_epi32(_mm_srli_si128(a, 8)));
}

inline simde__m512i cvtepu8_epi32(__m128i a) {
    return join_i(_mm256_cvtepu8_epi32(a), _mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)));
}

inline simde__m512i cvtepu8_epi16(__m256i a) {
    return join_i(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(a)), _mm256_cvtepu8_epi16(_mm256_extracti128_si256(a, 1)));
}

inline simde__m512 cvtph_ps(__m256i a) {
    return join(_mm256_cvtph_ps(_mm256_castsi256_si128(a)), _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)));
}

inline simde__m512 mask_loadu_ps(simde__m512 src, uint16_t k, const void* p) {
    alignas(64) float v[16];
    simde_mm512_store_ps(v, src);
    for (int i = 0; i < 16; ++i)
        if (k >> i & 1) std::memcpy(&v[i], (const float*)p + i, sizeof(float));
    return simde_mm512_load_ps(v);
}

inline void mask_storeu_ps(void* p, uint16_t k, simde__m512 a) {
    alignas(64) float v[16];
    simde_mm512_store_ps(v, a);
    for (int i = 0; i < 16; ++i)
        if (k >> i & 1) std::memcpy((float*)p + i, &v[i], sizeof(float));
}

inline float reduce_add_ps(simde__m512 a) {
    const __m256 t3 = _mm256_add_ps(hi(a), lo(a));
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 1));
}

inline float reduce_max_ps(simde__m512 a) {
    const __m256 t3 = _mm256_max_ps(hi(a), lo(a));
    const __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m128 t10 = _mm_max_ps(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1)));
    return _mm_cvtss_f32(t10);
}

}  // namespace avx512_emulated

#define _mm512_cvtepi32_ps(a) avx512_emulated::cvtepi32_ps(a)
#define _mm512_cvtepi8_epi32(a) avx512_emulated::cvtepi8_epi32(a)
#define _mm512_cvtepu8_epi32(a) avx512_emulated::cvtepu8_epi32(a)
#define _mm512_cvtepu8_epi16(a) avx512_emulated::cvtepu8_epi16(a)
#define _mm512_cvtph_ps(a) avx512_emulated::cvtph_ps(a)
#define _mm512_cvtps_ph(a, rounding)                                                 \
    _mm256_set_m128i(_mm256_cvtps_ph(avx512_emulated::hi(a), rounding),              \
                     _mm256_cvtps_ph(avx512_emulated::lo(a), rounding))
#define _mm512_extractf32x8_ps(a, index) ((index) & 1 ? avx512_emulated::hi(a) : avx512_emulated::lo(a))
#define _mm512_kortestz(a, b) ((uint16_t)((a) | (b)) == 0)
#define _mm512_mask_loadu_ps(src, k, p) avx512_emulated::mask_loadu_ps(src, k, p)
#define _mm512_maskz_loadu_ps(k, p) avx512_emulated::mask_loadu_ps(simde_mm512_setzero_ps(), k, p)
#define _mm512_mask_storeu_ps(p, k, a) avx512_emulated::mask_storeu_ps(p, k, a)
#define _mm512_reduce_add_ps(a) avx512_emulated::reduce_add_ps(a)
#define _mm512_reduce_max_ps(a) avx512_emulated::reduce_max_ps(a)
#define _mm512_undefined_ps() simde_mm512_setzero_ps()

#define __AVX512F__ 1
#define __AVX512BW__ 1
#define __AVX512DQ__ 1
#define __AVX512VL__ 1
#define __AVX512VNNI__ 1
