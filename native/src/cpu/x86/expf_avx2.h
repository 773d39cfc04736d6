// ggml's 8-lane expf for AVX2 + FMA units (ops_avx2.cpp's SiLU, attn_prefill_avx2.cpp's softmax),
// and the same operations on 16 lanes for AVX-512 units (attn_prefill_avx512.cpp, whose softmax
// must give the AVX2 kernel's bits). In an anonymous namespace: each translation unit that includes it is compiled with AVX2 flags
// and gets its own copy, so the linker never hands it to baseline code.
#pragma once
#include <immintrin.h>

namespace ei {
namespace {

// ggml_v_expf (AVX2 + FMA): same polynomial as the AVX-512 one, with the exponent applied by
// integer adds instead of vscalefps, and the large-|n| cases blended in by masks.
inline __m256 expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
    const __m256i c =
        _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256i d =
        _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
    return _mm256_or_ps(
        _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
        _mm256_andnot_ps(_mm256_castsi256_ps(d),
                         _mm256_or_ps(
                             _mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                             _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

#if defined(__AVX512F__)
// expf8's operations lane for lane on 16 lanes (masks for its compares and blends): the same bits
// as expf8, not ggml's AVX-512 expf (vscalefps, other roundings).
inline __m512 expf8_order_x16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512i e = _mm512_slli_epi32(_mm512_castps_si512(z), 23);
    const __m512 k = _mm512_castsi512_ps(_mm512_add_epi32(e, _mm512_castps_si512(_mm512_set1_ps(1))));
    const __m512 abs_n = _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_castps_si512(_mm512_set1_ps(-0.f)),
                                                                 _mm512_castps_si512(n)));
    const __mmask16 c = _mm512_cmp_ps_mask(abs_n, _mm512_set1_ps(126), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_mul_ps(_mm512_set1_ps(0x1.ffffecp-1f), b));
    const __m512 common = _mm512_fmadd_ps(j, k, k);
    if (!c) return common;
    const __m512i g = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                             _mm512_set1_epi32((int)0x82000000u));
    const __m512 s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7f000000)));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
    const __mmask16 d = _mm512_cmp_ps_mask(abs_n, _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 scaled = _mm512_mask_mov_ps(common, c, _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1));
    return _mm512_mask_mov_ps(scaled, d, _mm512_mul_ps(s1, s1));
}
#endif

}  // namespace
}  // namespace ei
