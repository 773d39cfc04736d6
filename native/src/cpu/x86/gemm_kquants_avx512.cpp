// AVX-512 VNNI GEMM for the k-quant weights (Q4_K, Q5_K, Q6_K) times Q8_K activations (prefill):
// cpu/x86/kquant_gemm.h's, on tiles of 16 rows. One VPDPBUSD takes 4 quants of each of the 16
// rows against the same 4 activation bytes of a column.
#include <immintrin.h>

// As gemm_avx512.cpp: GCC 12's AVX-512 headers trip -Wmaybe-uninitialized at -O3.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cpu/x86/kquant_gemm.h"

namespace ei {
namespace {

struct Avx512 {
    static constexpr int kLanes = 16;
    using I = __m512i;
    using F = __m512;
    static I zero() { return _mm512_setzero_si512(); }
    static I load(const void* p) { return _mm512_load_si512(p); }
    static I set1(int32_t v) { return _mm512_set1_epi32(v); }
    static I add(I a, I b) { return _mm512_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
    static I madd16(I a, I b) { return _mm512_madd_epi16(a, b); }
    static I times32(I a) { return _mm512_slli_epi32(a, 5); }
    static F zerof() { return _mm512_setzero_ps(); }
    static F loadf(const float* p) { return _mm512_load_ps(p); }
    static F set1f(float v) { return _mm512_set1_ps(v); }
    static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F subf(F a, F b) { return _mm512_sub_ps(a, b); }
    static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
    static void store(float* y, F v, int mr) { _mm512_mask_storeu_ps(y, (__mmask16)((1u << mr) - 1), v); }

    template <class W, int C>
    static void dot_groups(const uint32_t (*q)[kLanes], int g0, int g1, const block_q8_K* const* yb, int i, I* p) {
        for (int g = g0; g < g1; ++g) {
            const I w = load(q[g]);
            for (int c = 0; c < C; ++c) p[c] = _mm512_dpbusd_epi32(p[c], w, bcast32<Avx512>(yb[c][i].qs + 4 * g));
        }
    }
};

}  // namespace

void fill_gemm_kquants_avx512(KernelTable& t) { fill_kquant_gemms<Avx512>(t); }

}  // namespace ei
