// AVX-512 VNNI GEMV/GEMM over Q2_K, Q3_K and Q6_K weights repacked into 16-row groups, in
// FloatOrder::fast (cpu/repack.h has the layouts and the float order; bit for bit the scalar
// reference in cpu/repack.cpp, for any number of columns). All three are super-blocks of 16
// sub-blocks of 16 values with a scale each, and Q3_K and Q6_K a stored offset (4, 32), Q2_K a
// minimum a sub-block instead, so one tile serves them; the unpacking differs.
//
// A sub-block unpacks into four 512-bit pieces (16 rows x 4 u8 values, row j in int32 lane j;
// piece p the values 4p..4p+3 of the sub-block). Q6_K (0..63): its three 64-byte lines; two shifts
// and two masks of the high-bit line place each piece's two bits at bits 4-5 with zeros above, so
// one VPTERNLOGD per piece merges them under its nibble. Q3_K (0..7): its line of 2-bit values
// shifted by 2p, and its high bit moved to bit 2 and masked, merged in one VPTERNLOGD. Q2_K
// (0..3): its line shifted by 2p and masked.
// Per sub-block s and activation column, four VPDPBUSD against the column's 4-byte groups
// broadcast (signed q8_K values), started from -offset * bsums[s], give the 16 rows' exact
// sub-block sums; one VPMULLD by the 16 rows' scales of s (int8 widened to int32) and one add fold
// it into the super-block's int32 sum. VPDPBUSD and VPMULLD wrap, never saturate, and every
// partial sum is within int32 (bounds in repack.h), so the sums are exact whatever the order of
// their additions. One convert, one multiply (d_w * d_a) and one FMA per super-block finish 16
// outputs of a column. Q2_K's minimums go into a second int32 sum (one VPMULLD a sub-block by the
// column's bsums[s]) and a second chain (times dmin_w * d_a), subtracted at the end.
//
// Columns go in panels of up to kCols sharing each unpacked piece; a group passes under every panel
// before the next group (after the first panel it is in L1 or L2), and the first panel requests
// the next group ahead, three lines at a time as it goes.
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

// Activation columns per panel: 8 accumulators and 8 integer sums, with the 4 pieces, the scales
// and a sub-block's sum, fit the 32 registers.
constexpr int kCols = 8;
constexpr int kSubs = QK_K / 16;  // sub-blocks of a super-block, 4 pieces each

// The stored values' offset, whether minimums follow, and the values' runs of lines: their bytes
// and the sub-blocks each holds.
template <uint32_t Type> constexpr int kOffset = Type == TYPE_Q6_K ? 32 : Type == TYPE_Q3_K ? 4 : 0;
template <uint32_t Type> constexpr bool kMin = Type == TYPE_Q2_K;
template <uint32_t Type> constexpr int64_t kRunBytes = Type == TYPE_Q6_K   ? kQ6SubBlockBytes
                                                       : Type == TYPE_Q3_K ? kQ3SubBlockPairBytes
                                                                           : kQ2SubBlockBytes;
template <uint32_t Type> constexpr int kSubsPerRun = Type == TYPE_Q3_K ? 2 : 1;

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// (a & m) | (b & ~m): m chooses, bit by bit, a where it is set and b where it is not.
constexpr int kMerge = 0xE4;
// (a & m) | b.
constexpr int kMaskOr = 0xEC;

// The four pieces of sub-block s of super-block i (qs: the group's values; layouts in
// cpu/repack.h). Shifts are 16-bit, so bits cross into the neighbouring byte: the masks keep
// exactly what each piece needs.
template <uint32_t Type>
inline void unpack_sub_block(const uint8_t* qs, int64_t i, int s, __m512i piece[4]) {
    if constexpr (Type == TYPE_Q6_K) {
        // Q6_K: bits 4-5 of `high`, and the bits the shift brings into 6-7 are zeros of h02 or h13.
        const uint8_t* q = qs + (i * kSubs + s) * kQ6SubBlockBytes;
        const __m512i lo02 = _mm512_load_si512((const void*)q), lo13 = _mm512_load_si512((const void*)(q + 64));
        const __m512i high = _mm512_load_si512((const void*)(q + 128));
        const __m512i m33 = _mm512_set1_epi8(0x33), m0f = _mm512_set1_epi8(0x0F);
        const __m512i h02 = _mm512_and_si512(high, m33), h13 = _mm512_andnot_si512(m33, high);
        piece[0] = _mm512_ternarylogic_epi32(lo02, _mm512_slli_epi16(h02, 4), m0f, kMerge);
        piece[1] = _mm512_ternarylogic_epi32(lo13, _mm512_slli_epi16(h13, 2), m0f, kMerge);
        piece[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(lo02, 4), h02, m0f, kMerge);
        piece[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(lo13, 4), _mm512_srli_epi16(h13, 2), m0f, kMerge);
    } else if constexpr (Type == TYPE_Q2_K) {
        const __m512i line = _mm512_load_si512((const void*)(qs + (i * kSubs + s) * kQ2SubBlockBytes));
        const __m512i m03 = _mm512_set1_epi8(0x03);
        for (int p = 0; p < 4; ++p) piece[p] = _mm512_and_si512(_mm512_srli_epi16(line, 2 * p), m03);
    } else {
        // Q3_K: piece p's 2 bits at bits 2p of the sub-block's line, its high bit at bit 4r + p of
        // the pair's third line (r: which of the pair), moved to bit 2.
        const uint8_t* q = qs + (i * kSubs / 2 + s / 2) * kQ3SubBlockPairBytes;
        const int r = s % 2;
        const __m512i low = _mm512_load_si512((const void*)(q + 64 * r));
        const __m512i high = r ? _mm512_srli_epi16(_mm512_load_si512((const void*)(q + 128)), 4)
                               : _mm512_load_si512((const void*)(q + 128));
        const __m512i m03 = _mm512_set1_epi8(0x03), m04 = _mm512_set1_epi8(0x04);
        const __m512i hb[4] = {_mm512_and_si512(_mm512_slli_epi16(high, 2), m04),
                               _mm512_and_si512(_mm512_slli_epi16(high, 1), m04), _mm512_and_si512(high, m04),
                               _mm512_and_si512(_mm512_srli_epi16(high, 1), m04)};
        for (int p = 0; p < 4; ++p)
            piece[p] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(low, 2 * p), hb[p], m03, kMaskOr);
    }
}

// One group's 16 rows x NC columns. With prefetch > 0, requests the same lines `prefetch` bytes
// on (the next group's).
template <uint32_t Type, int NC>
EI_KERNEL_FUNCTION
void tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const block_q8_K* const* act, float* y,
          int64_t ldy, size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const uint16_t* dmin = reinterpret_cast<const uint16_t*>(grp + lay.m);  // Q2_K
    const int8_t* sc = reinterpret_cast<const int8_t*>(grp + lay.sc);
    const uint8_t* qs = grp + lay.qs;
    __m512 acc[NC], acc_m[kMin<Type> ? NC : 1];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (auto& v : acc_m) v = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        __m512i isum[NC], imin[kMin<Type> ? NC : 1];
        for (auto& v : isum) v = _mm512_setzero_si512();
        for (auto& v : imin) v = _mm512_setzero_si512();
        if (prefetch) {
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
            if (kMin<Type>) request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(dmin + i * kPackRows), prefetch);
        }
        for (int s = 0; s < kSubs; ++s) {
            const int8_t* scs = sc + (i * kSubs + s) * kPackRows;
            if (prefetch) {  // the lines into L2 only (as the other packed kernels: L1 requests throttled the stream)
                if (s % kSubsPerRun<Type> == 0) {
                    const uint8_t* q = qs + (i * kSubs + s) / kSubsPerRun<Type> * kRunBytes<Type>;
                    for (int t = 0; t < kRunBytes<Type> / 64; ++t) request_ahead<1, NC>(q + t * 64, prefetch);
                }
                if (s % 4 == 0) request_ahead<3, NC>(scs, prefetch);  // four sub-blocks' scales: one line
            }
            __m512i wq[4];
            unpack_sub_block<Type>(qs, i, s, wq);
            __m512i scale, mins;
            if constexpr (kMin<Type>) {  // Q2_K: the scale in the low nibble, the minimum in the high one
                const __m512i both = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i*)scs));
                scale = _mm512_and_si512(both, _mm512_set1_epi32(15));
                mins = _mm512_srli_epi32(both, 4);
            } else {
                scale = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i*)scs));
            }
            for (int c = 0; c < NC; ++c) {
                const int8_t* aq = act[c][i].qs + 16 * s;
                __m512i sub = _mm512_set1_epi32(-kOffset<Type> * (int32_t)act[c][i].bsums[s]);
                for (int t = 0; t < 4; ++t) sub = _mm512_dpbusd_epi32(sub, wq[t], bcast4(aq + 4 * t));
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(sub, scale));
                if constexpr (kMin<Type>)
                    imin[c] = _mm512_add_epi32(imin[c],
                                               _mm512_mullo_epi32(mins, _mm512_set1_epi32(act[c][i].bsums[s])));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(d + i * kPackRows)));
        for (int c = 0; c < NC; ++c) {
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(act[c][i].d));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), dd, acc[c]);
        }
        if constexpr (kMin<Type>) {
            const __m512 mw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(dmin + i * kPackRows)));
            for (int c = 0; c < NC; ++c) {
                const __m512 dm = _mm512_mul_ps(mw, _mm512_set1_ps(act[c][i].d));
                acc_m[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[c]), dm, acc_m[c]);
            }
        }
    }
    for (int c = 0; c < NC; ++c)
        _mm512_storeu_ps(y + c * ldy, kMin<Type> ? _mm512_sub_ps(acc[c], acc_m[c]) : acc[c]);
}

template <uint32_t Type>
void gemm_packed(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                 float* y, int64_t ldy) {
    run_packed_superblocks<kCols, Type>(k, m, n, w, w_stride, a, a_stride, y, ldy,
                                        [](auto nc, auto&&... args) { tile<Type, decltype(nc)::value>(args...); });
}

}  // namespace

void fill_gemm_packed_fast_q236k_avx512(KernelTable& t) {
    t.types[TYPE_Q2_K].gemm_16row_groups = gemm_packed<TYPE_Q2_K>;
    t.types[TYPE_Q3_K].gemm_16row_groups = gemm_packed<TYPE_Q3_K>;
    t.types[TYPE_Q6_K].gemm_16row_groups = gemm_packed<TYPE_Q6_K>;
}

}  // namespace ei
