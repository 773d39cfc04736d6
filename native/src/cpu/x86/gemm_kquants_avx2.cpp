// AVX2 GEMM for the k-quant weights (Q4_K, Q5_K, Q6_K) times Q8_K activations (prefill):
// cpu/x86/kquant_gemm.h's, on tiles of 8 rows, every output bit-identical to the per-output dot
// of the same order (tests/test_gemm.py) and through it to llama.cpp.
//
// Why it exists: without it an AVX2 prompt multiplies a k-quant matrix one output at a time,
// unpacking each super-block once per (row, column), which costs far more per weight than the
// packed types' GEMMs (docs/PERFORMANCE.md has the measurement, Zen 3 section).
//
// No VPDPBUSD here: four unsigned quants times four int8 activations per 32-bit lane become
// VPMADDUBSW (pairs, in int16) then VPMADDWD against ones (int32), and the int16 pair sums of
// several 4-quant groups are added before that one VPMADDWD while they cannot overflow: a pair
// sum is at most 2 * q_max * 128 in magnitude (q_max 15, 31, 63), so 8 groups of q4_K (30720),
// 4 of q5_K (31744) or 2 of q6_K (32256) stay under 2^15. The integers are the same exact sums.
#include <immintrin.h>

#include "cpu/x86/kquant_gemm.h"

namespace ei {
namespace {

struct Avx2 {
    static constexpr int kLanes = 8;
    using I = __m256i;
    using F = __m256;
    static I zero() { return _mm256_setzero_si256(); }
    static I load(const void* p) { return _mm256_load_si256((const __m256i*)p); }
    static I set1(int32_t v) { return _mm256_set1_epi32(v); }
    static I add(I a, I b) { return _mm256_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
    static I madd16(I a, I b) { return _mm256_madd_epi16(a, b); }
    static I times32(I a) { return _mm256_slli_epi32(a, 5); }
    static F zerof() { return _mm256_setzero_ps(); }
    static F loadf(const float* p) { return _mm256_load_ps(p); }
    static F set1f(float v) { return _mm256_set1_ps(v); }
    static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F subf(F a, F b) { return _mm256_sub_ps(a, b); }
    static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
    static void store(float* y, F v, int mr) {
        if (mr == kLanes) {
            _mm256_storeu_ps(y, v);
            return;
        }
        alignas(32) float tmp[kLanes];
        _mm256_store_ps(tmp, v);
        std::memcpy(y, tmp, sizeof(float) * mr);
    }

    // 4-quant groups whose int16 pair sums add up without overflow (see the top of the file).
    template <class W>
    static constexpr int kGroupsPerMadd = 32767 / (2 * W::kMaxQuant * 128);

    template <class W, int C>
    static void dot_groups(const uint32_t (*q)[kLanes], int g0, int g1, const block_q8_K* const* yb, int i, I* p) {
        const I ones = _mm256_set1_epi16(1);
        for (int c0 = g0; c0 < g1; c0 += kGroupsPerMadd<W>) {
            I p16[C];
            for (int c = 0; c < C; ++c) p16[c] = zero();
            for (int g = c0; g < std::min(g1, c0 + kGroupsPerMadd<W>); ++g) {
                const I w = load(q[g]);
                for (int c = 0; c < C; ++c)
                    p16[c] = _mm256_add_epi16(p16[c], _mm256_maddubs_epi16(w, bcast32<Avx2>(yb[c][i].qs + 4 * g)));
            }
            for (int c = 0; c < C; ++c) p[c] = add(p[c], madd16(p16[c], ones));
        }
    }
};

}  // namespace

void fill_gemm_kquants_avx2(KernelTable& t) { fill_kquant_gemms<Avx2>(t); }

}  // namespace ei
