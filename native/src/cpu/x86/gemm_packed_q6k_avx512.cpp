// AVX-512 VNNI GEMV/GEMM over Q6_K weights repacked into 16-row groups, in FloatOrder::fast
// (cpu/repack.h has the layout and the float order; bit for bit the scalar reference in
// cpu/repack.cpp, for any number of columns).
//
// A sub-block's three 64-byte lines unpack into four 512-bit pieces (16 rows x 4 u8 values 0..63,
// row j in int32 lane j; piece p the values 4p..4p+3 of the sub-block): two shifts and two masks
// of the high-bit line place each piece's two bits at bits 4-5 with zeros above, so one VPTERNLOGD
// per piece merges them under its nibble. Per sub-block s and activation column, four VPDPBUSD against the column's
// 4-byte groups broadcast (signed q8_K values), started from -32 * bsums[s], give the 16 rows'
// exact sub-block sums; one VPMULLD by the 16 rows' scales of s (int8 widened to int32) and one
// add fold it into the super-block's int32 sum. VPDPBUSD and VPMULLD wrap, never saturate, and
// every partial sum is within int32 (bound in repack.h), so the sums are exact whatever the order
// of their additions. One convert, one multiply (d_w * d_a) and one FMA per super-block finish 16
// outputs of a column.
//
// Columns go in panels of up to kCols sharing each unpacked piece; a group passes under every panel
// before the next group (after the first panel it is in L1 or L2), and the first panel requests
// the next group ahead, a sub-block at a time as it goes.
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

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// The four pieces of the sub-block at q (layout in cpu/repack.h). Shifts are 16-bit, so bits cross
// into the neighbouring byte: the masks keep exactly what each piece needs (bits 4-5 of `high`,
// and the bits the shift brings into 6-7 are zeros of h01 or h23).
inline void unpack_sub_block(const uint8_t* q, __m512i piece[4]) {
    const __m512i lo02 = _mm512_load_si512((const void*)q), lo13 = _mm512_load_si512((const void*)(q + 64));
    const __m512i high = _mm512_load_si512((const void*)(q + 128));
    const __m512i m33 = _mm512_set1_epi8(0x33), m0f = _mm512_set1_epi8(0x0F);
    const __m512i h02 = _mm512_and_si512(high, m33), h13 = _mm512_andnot_si512(m33, high);
    // (a & m0f) | (b & ~m0f): m0f chooses, bit by bit, a where it is set and b where it is not.
    constexpr int kMerge = 0xE4;
    piece[0] = _mm512_ternarylogic_epi32(lo02, _mm512_slli_epi16(h02, 4), m0f, kMerge);
    piece[1] = _mm512_ternarylogic_epi32(lo13, _mm512_slli_epi16(h13, 2), m0f, kMerge);
    piece[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(lo02, 4), h02, m0f, kMerge);
    piece[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(lo13, 4), _mm512_srli_epi16(h13, 2), m0f, kMerge);
}

// One group's 16 rows x NC columns. With prefetch > 0, requests the same lines `prefetch` bytes
// on (the next group's).
template <int NC>
EI_KERNEL_FUNCTION
void tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const block_q8_K* const* act, float* y,
          int64_t ldy, size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const int8_t* sc = reinterpret_cast<const int8_t*>(grp + lay.sc);
    const uint8_t* qs = grp + lay.qs;
    __m512 acc[NC];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        __m512i isum[NC];
        for (auto& v : isum) v = _mm512_setzero_si512();
        if (prefetch) request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
        for (int s = 0; s < kSubs; ++s) {
            const uint8_t* q = qs + (i * kSubs + s) * kQ6SubBlockBytes;
            const int8_t* scs = sc + (i * kSubs + s) * kPackRows;
            if (prefetch) {  // the lines into L2 only (as the other packed kernels: L1 requests throttled the stream)
                for (int t = 0; t < 3; ++t) request_ahead<1, NC>(q + t * 64, prefetch);
                if (s % 4 == 0) request_ahead<3, NC>(scs, prefetch);  // four sub-blocks' scales: one line
            }
            __m512i wq[4];
            unpack_sub_block(q, wq);
            const __m512i scale = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i*)scs));
            for (int c = 0; c < NC; ++c) {
                const int8_t* aq = act[c][i].qs + 16 * s;
                __m512i sub = _mm512_set1_epi32(-32 * (int32_t)act[c][i].bsums[s]);
                for (int t = 0; t < 4; ++t) sub = _mm512_dpbusd_epi32(sub, wq[t], bcast4(aq + 4 * t));
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(sub, scale));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(d + i * kPackRows)));
        for (int c = 0; c < NC; ++c) {
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(act[c][i].d));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), dd, acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

void gemm_packed_q6_K(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                      float* y, int64_t ldy) {
    run_packed_superblocks<kCols, TYPE_Q6_K>(k, m, n, w, w_stride, a, a_stride, y, ldy,
                                       [](auto nc, auto&&... args) { tile<decltype(nc)::value>(args...); });
}

}  // namespace

void fill_gemm_packed_fast_q6k_avx512(KernelTable& t) { t.types[TYPE_Q6_K].gemm_16row_groups = gemm_packed_q6_K; }

}  // namespace ei
