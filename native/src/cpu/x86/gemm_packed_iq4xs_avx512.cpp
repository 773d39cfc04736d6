// AVX-512 VNNI GEMV/GEMM over IQ4_XS weights repacked into 16-row groups, in FloatOrder::fast
// (cpu/repack.h has the layout and the float order; bit for bit the scalar reference in
// cpu/repack.cpp, for any number of columns).
//
// A sub-block's four 64-byte pieces (16 rows x 4 bytes of nibbles, row j in int32 lane j) split
// into low and high nibbles and go through VPSHUFB into the table values + 128 (u8, as VPDPBUSD
// wants): eight registers, the 16 rows' 32 values. Per activation column, eight VPDPBUSD against
// the column's 4-byte groups broadcast (signed q8_K values), started from -128 * (the column's
// sum over the sub-block, two of q8_K's 16-value bsums), give the rows' exact sub-block sums; one
// VPMULLD by the rows' scales (ls - 32) and one add fold them into the super-block's sum. Every
// partial sum is within int32 (bound in repack.h) and VPDPBUSD wraps, never saturates, so the
// sums are exact whatever the order of their additions. One convert, one multiply (d_w * d_a)
// and one FMA per super-block finish 16 outputs of a column.
//
// Columns go in panels of up to kCols sharing each unpacked sub-block; a group passes under every
// panel before the next group, and the first panel requests the next group ahead as it goes.
#include <immintrin.h>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -Wall at -O3
// then reports as maybe-uninitialized inside the headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>

#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "cpu/x86/packed_panels.h"
#include "cpu/x86/gemm_avx512.h"
#include "cpu/x86/iq4_biased.h"
#include "cpu/x86/kernel_function.h"
#include "cpu/x86/request_ahead.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// Activation columns per panel: 8 accumulators and 8 integer sums beside the 8 unpacked values,
// the scales and a sub-block's sum fill the 32 registers.
constexpr int kCols = 8;
constexpr int kSubs = QK_K / 32;  // sub-blocks of a super-block, four 64-byte pieces each

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
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
    // (The zero-masking form: GCC 12 warns of the plain one's undefined upper lanes once this
    // tile is compiled apart from its caller.)
    const __m512i table = _mm512_maskz_broadcast_i32x4((__mmask16)-1, _mm_load_si128((const __m128i*)kIq4nlBiased.v));
    const __m512i low = _mm512_set1_epi8(15);
    __m512 acc[NC];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        __m512i isum[NC];
        for (auto& v : isum) v = _mm512_setzero_si512();
        if (prefetch) {
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
            for (int t = 0; t < 2; ++t) request_ahead<3, NC>(sc + (i * kSubs + 4 * t) * kPackRows, prefetch);
        }
        for (int s = 0; s < kSubs; ++s) {
            const uint8_t* q = qs + (i * kSubs + s) * 4 * 64;
            if (prefetch)  // the pieces into L2 only (as the other packed kernels: L1 requests throttled the stream)
                for (int t = 0; t < 4; ++t) request_ahead<1, NC>(q + t * 64, prefetch);
            __m512i wq[8];  // wq[t]: elements 4t..4t+3 of the sub-block (t >= 4: 16 + 4(t - 4)..)
            for (int t = 0; t < 4; ++t) {
                const __m512i v = _mm512_load_si512((const void*)(q + t * 64));
                wq[t] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low));
                wq[t + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
            }
            const __m512i scale = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i*)(sc + (i * kSubs + s) * kPackRows)));
            for (int c = 0; c < NC; ++c) {
                const int8_t* aq = act[c][i].qs + 32 * s;
                const int32_t asum = act[c][i].bsums[2 * s] + act[c][i].bsums[2 * s + 1];
                __m512i lo = _mm512_set1_epi32(-128 * asum), hi = _mm512_setzero_si512();
                for (int t = 0; t < 4; ++t) {  // two chains, so a lone column is not one of eight
                    lo = _mm512_dpbusd_epi32(lo, wq[t], bcast4(aq + 4 * t));
                    hi = _mm512_dpbusd_epi32(hi, wq[t + 4], bcast4(aq + 16 + 4 * t));
                }
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(_mm512_add_epi32(lo, hi), scale));
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

void gemm_packed_iq4_xs(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                        float* y, int64_t ldy) {
    run_packed_superblocks<kCols, TYPE_IQ4_XS>(k, m, n, w, w_stride, a, a_stride, y, ldy,
                                       [](auto nc, auto&&... args) { tile<decltype(nc)::value>(args...); });
}

}  // namespace

void fill_gemm_packed_fast_iq4xs_avx512(KernelTable& t) { t.types[TYPE_IQ4_XS].gemm_16row_groups = gemm_packed_iq4_xs; }

}  // namespace ei
