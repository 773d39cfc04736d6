// AVX-512 VNNI GEMV/GEMM over Q4_K and Q5_K weights repacked into 16-row groups, in
// FloatOrder::fast (cpu/repack.h has the layout and the float order; bit for bit the scalar
// reference in cpu/repack.cpp, for any number of columns).
//
// A 64-byte piece holds 16 rows x 4 bytes (row j in int32 lane j): its low nibbles are 4 values of
// sub-block 2c, its high nibbles 4 of sub-block 2c + 1 (Q5_K: with their fifth bits added, as the
// AVX2 kernel adds them, cpu/x86/fifth_bits_avx2.h), unsigned as VPDPBUSD wants them against the
// column's signed activation bytes broadcast. Eight VPDPBUSD a sub-block give the 16
// rows' exact sub-block sums; one VPMULLD by the rows' scales (bytes widened to int32) and one add
// fold each into the super-block's int32 sum. The minimums take one VPDPWSSD a pair of
// sub-blocks: the rows' two minimums (int16) against the column's two sub-block sums of q_a. The
// integers never wrap (bounds in repack.h), so they are exact whatever the order of their
// additions. One convert, one multiply and one FMA per super-block and column for each chain
// finish 16 outputs.
//
// Columns go in panels of up to kCols sharing each piece's nibbles; the first panel requests the
// next group ahead as it goes.
#include <immintrin.h>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -Wall at -O3
// then reports as maybe-uninitialized inside the headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>

#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "cpu/x86/packed_panels.h"
#include "cpu/x86/gemm_avx512.h"
#include "cpu/x86/kernel_function.h"
#include "cpu/x86/request_ahead.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// Activation columns per panel: per column two chains, two integer sums and two sub-block sums,
// with the nibbles and scales, fit the 32 registers.
constexpr int kCols = 4;
constexpr int kChunks = QK_K / 64;  // 64 elements: sub-blocks 2c and 2c + 1, eight pieces

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// The 16 rows' fifth bits of a piece (qh: a byte a row) as what they add to its low and high
// nibbles: byte b of lane j is 16 where bit b (lo16) or bit 4 + b (hi16) of row j's byte is set.
inline void fifth_bits_16rows(const uint8_t* qh, __m512i& lo16, __m512i& hi16) {
    const __m512i spread = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
    const __m512i fifth = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 16, 16, 0, 16, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0));
    const __m512i bit_lo = _mm512_set1_epi32(0x08040201), bit_hi = _mm512_set1_epi32((int)0x80402010);
    const __m512i h = _mm512_shuffle_epi8(_mm512_cvtepu8_epi32(_mm_load_si128((const __m128i*)qh)), spread);
    lo16 = _mm512_shuffle_epi8(fifth, _mm512_and_si512(h, bit_lo));
    hi16 = _mm512_min_epu8(_mm512_and_si512(h, bit_hi), _mm512_set1_epi8(16));
}

// One group's 16 rows x NC columns. With prefetch > 0, requests the group's lines `prefetch`
// bytes on (the next group's).
template <uint32_t Type, int NC>
EI_KERNEL_FUNCTION
void tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const block_q8_K* const* act, float* y,
          int64_t ldy, size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const uint16_t* dmin = reinterpret_cast<const uint16_t*>(grp + lay.m);
    const uint8_t* qs = grp + lay.qs;
    const uint8_t* qh = grp + lay.qh;  // Q5_K
    constexpr bool kFifth = Type == TYPE_Q5_K;
    const __m512i low = _mm512_set1_epi8(15);
    __m512 acc[NC], acc_m[NC];
    for (int c = 0; c < NC; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* sc = grp + lay.sc + i * 256;
        if (prefetch) {
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(dmin + i * kPackRows), prefetch);
            for (int t = 0; t < 4; ++t) request_ahead<3, NC>(sc + 64 * t, prefetch);
        }
        __m512i isum[NC], imin[NC];
        for (int c = 0; c < NC; ++c) {
            int32_t bs[4];
            q4_K_bsum_pairs(act[c][i], bs);
            imin[c] = _mm512_setzero_si512();
            for (int u = 0; u < 4; ++u) {
                const __m512i mins = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i*)(sc + 128 + 32 * u)));
                imin[c] = _mm512_dpwssd_epi32(imin[c], mins, _mm512_set1_epi32(bs[u]));
            }
            isum[c] = _mm512_setzero_si512();
        }
        for (int ch = 0; ch < kChunks; ++ch) {
            const int64_t piece0 = (i * kChunks + ch) * 8;
            const uint8_t* q = qs + piece0 * 64;
            if (prefetch) {  // into L2 only, as the other packed kernels do
                for (int t = 0; t < 8; ++t) request_ahead<1, NC>(q + t * 64, prefetch);
                if (kFifth)  // the chunk's fifth bits: two lines
                    for (int l = 0; l < 2; ++l) request_ahead<1, NC>(qh + piece0 * kPackRows + 64 * l, prefetch);
            }
            __m512i lo_sum[NC], hi_sum[NC];
            for (int c = 0; c < NC; ++c) lo_sum[c] = hi_sum[c] = _mm512_setzero_si512();
            for (int t = 0; t < 8; ++t) {
                const __m512i v = _mm512_load_si512((const void*)(q + t * 64));
                __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                if constexpr (kFifth) {
                    __m512i lo16, hi16;
                    fifth_bits_16rows(qh + (piece0 + t) * kPackRows, lo16, hi16);
                    lo = _mm512_or_si512(lo, lo16);
                    hi = _mm512_or_si512(hi, hi16);
                }
                for (int c = 0; c < NC; ++c) {
                    const int8_t* aq = act[c][i].qs + 64 * ch + 4 * t;
                    lo_sum[c] = _mm512_dpbusd_epi32(lo_sum[c], lo, bcast4(aq));
                    hi_sum[c] = _mm512_dpbusd_epi32(hi_sum[c], hi, bcast4(aq + 32));
                }
            }
            const __m512i lo_scale = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i*)(sc + 16 * (2 * ch))));
            const __m512i hi_scale = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i*)(sc + 16 * (2 * ch + 1))));
            for (int c = 0; c < NC; ++c)
                isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(lo_sum[c], lo_scale),
                                                                     _mm512_mullo_epi32(hi_sum[c], hi_scale)));
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(d + i * kPackRows)));
        const __m512 mw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(dmin + i * kPackRows)));
        for (int c = 0; c < NC; ++c) {
            const __m512 da = _mm512_set1_ps(act[c][i].d);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(dw, da), acc[c]);
            acc_m[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[c]), _mm512_mul_ps(mw, da), acc_m[c]);
        }
    }
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(y + c * ldy, _mm512_sub_ps(acc[c], acc_m[c]));
}

template <uint32_t Type>
void gemm_packed_q45_K(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                       float* y, int64_t ldy) {
    run_packed_superblocks<kCols, Type>(k, m, n, w, w_stride, a, a_stride, y, ldy,
                                        [](auto nc, auto&&... args) { tile<Type, decltype(nc)::value>(args...); });
}

}  // namespace

void fill_gemm_packed_fast_q45k_avx512(KernelTable& t) {
    t.types[TYPE_Q4_K].gemm_16row_groups = gemm_packed_q45_K<TYPE_Q4_K>;
    t.types[TYPE_Q5_K].gemm_16row_groups = gemm_packed_q45_K<TYPE_Q5_K>;
}

}  // namespace ei
