// AVX2 GEMV/GEMM over Q4_K and Q5_K weights repacked into 16-row groups, in FloatOrder::fast
// (cpu/repack.h has the layout and the float order; bit for bit the scalar reference in
// cpu/repack.cpp and the AVX-512 kernel in gemm_packed_q45k_avx512.cpp, for any number of columns).
//
// A group's 64-byte pieces are two 256-bit halves, rows 0..7 and 8..15 (row 8h + j in int32 lane j
// of half h). A piece's low nibbles are 4 values of sub-block 2c of each row, its high nibbles 4
// of sub-block 2c + 1 (Q5_K: with their fifth bits added, cpu/x86/fifth_bits_avx2.h): unsigned, so
// VPMADDUBSW takes them as they are against the activation bytes broadcast. A pair is at most 2 *
// 15 * 128 = 3840 (Q5_K: 2 * 31 * 128 = 7936), so eight pieces (Q5_K: four) add up in int16
// without overflow, and one VPMADDWD against the rows' scales (the 6-bit scale in both int16 of a
// row's lane) takes them to int32, scaled: exact. The minimums likewise:
// one VPMADDWD a pair of sub-blocks, the rows' two minimums against the column's two sub-block
// sums of q_a. One convert, one multiply and one FMA per super-block and column for each of the
// two chains finish 8 outputs.
//
// A super-block is walked twice, once per half (its 2 KiB of nibbles are in L1 the second time);
// each half's pieces go through every column of the panel; the first panel requests the next
// group ahead as it goes.
#include <immintrin.h>

#include <cstring>

#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "cpu/x86/fifth_bits_avx2.h"
#include "cpu/x86/packed_panels.h"
#include "cpu/x86/gemm_avx2.h"
#include "cpu/x86/kernel_function.h"
#include "cpu/x86/request_ahead.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// Activation columns per panel (as the other super-block kernels').
constexpr int kCols = 4;
constexpr int kChunks = QK_K / 64;  // 64 elements: sub-blocks 2c and 2c + 1, eight pieces

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Rows 8h..8h+7's 6-bit values at p[0..7] as (v_j, v_j) int16 pairs, row j in int32 lane j.
inline __m256i row_pairs(const uint8_t* p) {
    const __m128i v = _mm_loadl_epi64((const __m128i*)p);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
}

// One group's 16 rows x NC columns into y[c][0..15]. With prefetch > 0, requests the group's lines
// `prefetch` bytes on (the next group's).
template <uint32_t Type, int NC>
EI_KERNEL_FUNCTION
void tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const block_q8_K* const* act, float* y,
          int64_t ldy, size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const uint16_t* dmin = reinterpret_cast<const uint16_t*>(grp + lay.m);
    const uint8_t* qs = grp + lay.qs;
    const uint8_t* qh = grp + lay.qh;  // Q5_K
    constexpr bool kFifth = Type == TYPE_Q5_K;
    constexpr int kInt16Pieces = kFifth ? 4 : 8;  // pieces summed in int16 before widening
    const __m256i low = _mm256_set1_epi8(15);
    __m256 acc[NC][2], acc_m[NC][2];
    for (int c = 0; c < NC; ++c) acc[c][0] = acc[c][1] = acc_m[c][0] = acc_m[c][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* sc = grp + lay.sc + i * 256;
        if (prefetch) {
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(dmin + i * kPackRows), prefetch);
            for (int t = 0; t < 4; ++t) request_ahead<3, NC>(sc + 64 * t, prefetch);
        }
        int32_t bs[NC][4];
        for (int c = 0; c < NC; ++c) q4_K_bsum_pairs(act[c][i], bs[c]);
        for (int h = 0; h < 2; ++h) {
            __m256i isum[NC], imin[NC];
            for (int c = 0; c < NC; ++c) isum[c] = imin[c] = _mm256_setzero_si256();
            for (int u = 0; u < 4; ++u) {
                const __m256i mins = _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i*)(sc + 128 + 32 * u + 16 * h)));
                for (int c = 0; c < NC; ++c)
                    imin[c] = _mm256_add_epi32(imin[c], _mm256_madd_epi16(mins, _mm256_set1_epi32(bs[c][u])));
            }
            for (int ch = 0; ch < kChunks; ++ch) {
                const int64_t piece0 = (i * kChunks + ch) * 8;
                const uint8_t* q = qs + piece0 * 64;
                if (prefetch && h == 0) {  // into L2 only, as the other packed kernels do
                    for (int t = 0; t < 8; ++t) request_ahead<1, NC>(q + t * 64, prefetch);
                    if (kFifth)  // the chunk's fifth bits: two lines
                        for (int l = 0; l < 2; ++l) request_ahead<1, NC>(qh + piece0 * kPackRows + 64 * l, prefetch);
                }
                const __m256i lo_scale = row_pairs(sc + 16 * (2 * ch) + 8 * h);
                const __m256i hi_scale = row_pairs(sc + 16 * (2 * ch + 1) + 8 * h);
                __m256i lo_sum[NC], hi_sum[NC];
                for (int c = 0; c < NC; ++c) lo_sum[c] = hi_sum[c] = _mm256_setzero_si256();
                for (int t = 0; t < 8; ++t) {
                    const __m256i v = _mm256_load_si256((const __m256i*)(q + t * 64 + 32 * h));
                    __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                    if constexpr (kFifth) {
                        __m256i lo16, hi16;
                        fifth_bits_8rows(qh + (piece0 + t) * kPackRows + 8 * h, lo16, hi16);
                        lo = _mm256_or_si256(lo, lo16);
                        hi = _mm256_or_si256(hi, hi16);
                    }
                    for (int c = 0; c < NC; ++c) {
                        const int8_t* aq = act[c][i].qs + 64 * ch + 4 * t;
                        lo_sum[c] = _mm256_add_epi16(lo_sum[c], _mm256_maddubs_epi16(lo, bcast4(aq)));
                        hi_sum[c] = _mm256_add_epi16(hi_sum[c], _mm256_maddubs_epi16(hi, bcast4(aq + 32)));
                    }
                    if ((t + 1) % kInt16Pieces == 0)
                        for (int c = 0; c < NC; ++c) {
                            isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(lo_sum[c], lo_scale),
                                                                                 _mm256_madd_epi16(hi_sum[c], hi_scale)));
                            lo_sum[c] = hi_sum[c] = _mm256_setzero_si256();
                        }
                }
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(d + i * kPackRows + 8 * h)));
            const __m256 mw = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(dmin + i * kPackRows + 8 * h)));
            for (int c = 0; c < NC; ++c) {
                const __m256 da = _mm256_set1_ps(act[c][i].d);
                acc[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(dw, da), acc[c][h]);
                acc_m[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin[c]), _mm256_mul_ps(mw, da), acc_m[c][h]);
            }
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + c * ldy + 8 * h, _mm256_sub_ps(acc[c][h], acc_m[c][h]));
}

template <uint32_t Type>
void gemm_packed_q45_K(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                       float* y, int64_t ldy) {
    run_packed_superblocks<kCols, Type>(k, m, n, w, w_stride, a, a_stride, y, ldy,
                                        [](auto nc, auto&&... args) { tile<Type, decltype(nc)::value>(args...); });
}

}  // namespace

void fill_gemm_packed_fast_q45k_avx2(KernelTable& t) {
    t.types[TYPE_Q4_K].gemm_16row_groups = gemm_packed_q45_K<TYPE_Q4_K>;
    t.types[TYPE_Q5_K].gemm_16row_groups = gemm_packed_q45_K<TYPE_Q5_K>;
}

}  // namespace ei
