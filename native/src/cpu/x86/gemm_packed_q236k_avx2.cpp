// AVX2 GEMV/GEMM over Q2_K, Q3_K and Q6_K weights repacked into 16-row groups, in FloatOrder::fast
// (cpu/repack.h has the layouts and the float order; bit for bit the scalar reference in
// cpu/repack.cpp and the AVX-512 kernel in gemm_packed_q236k_avx512.cpp, for any number of
// columns). All three are super-blocks of 16 sub-blocks of 16 values with a scale each, and Q3_K
// and Q6_K a stored offset (4, 32), Q2_K a minimum a sub-block instead: one tile, three unpackings.
//
// A group's 64-byte lines are two 256-bit halves, rows 0..7 and 8..15 (row 8h + j in int32 lane
// j of half h); a sub-block unpacks, a half at a time, into four pieces of 8 rows x 4 u8 values
// (0..63, Q3_K 0..7, Q2_K 0..3; piece p the values 4p..4p+3 of the sub-block; layouts in cpu/repack.h), and
// each half goes through every column of the panel, so the group is walked once (a pass per half
// over the whole group, walking it twice, was measured about twice as slow for a lone column;
// the activations' broadcasts are loads, taken twice). Without VNNI the
// integer sums take VPMADDUBSW (u8 weight x s8 activation, adjacent pairs into int16): a pair is
// at most 2 * 63 * 128 = 16128, two pieces' pairs added are still below 2^15, so nothing
// saturates. VPMADDWD against the rows' scales (each row's int8 scale in both int16 of its lane)
// then sums each lane's pairs times the scale exactly in int32. The stored values' offset comes
// in as scale * bsums (VPMADDWD of the scales against the bsum in the low int16 of every lane),
// times -32 (Q3_K -4). Every partial sum is within int32 (bounds in repack.h), so each
// super-block's sum is the scalar reference's integer; one convert, one multiply (d_w * d_a) and
// one FMA per super-block and column finish 8 outputs. Q2_K's minimums come in as the offset
// does (its minimums in place of the scales), into a second chain (times dmin_w * d_a)
// subtracted at the end.
#include <immintrin.h>

#include <cstring>

#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "cpu/x86/packed_panels.h"
#include "cpu/x86/gemm_avx2.h"
#include "cpu/x86/kernel_function.h"
#include "cpu/x86/request_ahead.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// Activation columns per panel: with 16 registers, 4 accumulators and 4 integer sums leave the
// 4 pieces, the scales and a few temporaries.
constexpr int kCols = 4;
constexpr int kSubs = QK_K / 16;  // sub-blocks of a super-block, 4 pieces each

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// The stored values' offset as a shift (32 = 1 << 5, 4 = 1 << 2), whether minimums follow
// instead (Q2_K), and the values' runs of lines: their bytes and the sub-blocks each holds.
template <uint32_t Type> constexpr int kOffsetShift = Type == TYPE_Q6_K ? 5 : 2;
template <uint32_t Type> constexpr bool kMin = Type == TYPE_Q2_K;
template <uint32_t Type> constexpr int64_t kRunBytes = Type == TYPE_Q6_K   ? kQ6SubBlockBytes
                                                       : Type == TYPE_Q3_K ? kQ3SubBlockPairBytes
                                                                           : kQ2SubBlockBytes;
template <uint32_t Type> constexpr int kSubsPerRun = Type == TYPE_Q3_K ? 2 : 1;

// Half h of the four pieces of sub-block s of super-block i (qs: the group's values). Shifts are
// 16-bit: the masks keep each piece's bits and nothing a shift brought across bytes.
template <uint32_t Type>
inline void unpack_sub_block_half(const uint8_t* qs, int64_t i, int s, int h, __m256i piece[4]) {
    if constexpr (Type == TYPE_Q6_K) {  // the nibble, and the two high bits placed at bits 4-5
        const uint8_t* q = qs + (i * kSubs + s) * kQ6SubBlockBytes;
        const __m256i lo02 = _mm256_load_si256((const __m256i*)(q + 32 * h));
        const __m256i lo13 = _mm256_load_si256((const __m256i*)(q + 64 + 32 * h));
        const __m256i high = _mm256_load_si256((const __m256i*)(q + 128 + 32 * h));
        const __m256i m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
        piece[0] = _mm256_or_si256(_mm256_and_si256(lo02, m0f), _mm256_and_si256(_mm256_slli_epi16(high, 4), m30));
        piece[1] = _mm256_or_si256(_mm256_and_si256(lo13, m0f), _mm256_and_si256(_mm256_slli_epi16(high, 2), m30));
        piece[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo02, 4), m0f), _mm256_and_si256(high, m30));
        piece[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo13, 4), m0f),
                                   _mm256_and_si256(_mm256_srli_epi16(high, 2), m30));
    } else if constexpr (Type == TYPE_Q2_K) {  // the 2 bits at bits 2p
        const uint8_t* q = qs + (i * kSubs + s) * kQ2SubBlockBytes;
        const __m256i line = _mm256_load_si256((const __m256i*)(q + 32 * h)), m03 = _mm256_set1_epi8(0x03);
        for (int p = 0; p < 4; ++p) piece[p] = _mm256_and_si256(_mm256_srli_epi16(line, 2 * p), m03);
    } else {  // Q3_K: the 2 bits at bits 2p, and the high bit (bit 4r + p, r: which of the pair) at bit 2
        const uint8_t* q = qs + (i * kSubs / 2 + s / 2) * kQ3SubBlockPairBytes;
        const int r = s % 2;
        const __m256i low = _mm256_load_si256((const __m256i*)(q + 64 * r + 32 * h));
        __m256i high = _mm256_load_si256((const __m256i*)(q + 128 + 32 * h));
        if (r) high = _mm256_srli_epi16(high, 4);
        const __m256i m03 = _mm256_set1_epi8(0x03), m04 = _mm256_set1_epi8(0x04);
        piece[0] = _mm256_or_si256(_mm256_and_si256(low, m03), _mm256_and_si256(_mm256_slli_epi16(high, 2), m04));
        piece[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low, 2), m03),
                                   _mm256_and_si256(_mm256_slli_epi16(high, 1), m04));
        piece[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low, 4), m03), _mm256_and_si256(high, m04));
        piece[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low, 6), m03),
                                   _mm256_and_si256(_mm256_srli_epi16(high, 1), m04));
    }
}

// One group's 16 rows x NC columns into y[c][0..15], as two halves of 8 rows (half h: rows
// 8h..8h+7), a sub-block at a time. With prefetch > 0, requests the
// group's lines `prefetch` bytes on (the next group's).
template <uint32_t Type, int NC>
EI_KERNEL_FUNCTION
void tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const block_q8_K* const* act, float* y,
          int64_t ldy, size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const int8_t* sc = reinterpret_cast<const int8_t*>(grp + lay.sc);
    const uint8_t* qs = grp + lay.qs;
    const uint16_t* dmin = reinterpret_cast<const uint16_t*>(grp + lay.m);  // Q2_K
    __m256 acc[NC][2], acc_m[kMin<Type> ? NC : 1][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    for (auto& a : acc_m) a[0] = a[1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        // offs: sum_s w[s] * bsums[s], w the scales (taken offset times at the end) or Q2_K's minimums
        __m256i isum[NC][2], offs[NC][2];
        for (int c = 0; c < NC; ++c) isum[c][0] = isum[c][1] = offs[c][0] = offs[c][1] = _mm256_setzero_si256();
        if (prefetch) {
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
            if (kMin<Type>) request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(dmin + i * kPackRows), prefetch);
        }
        for (int s = 0; s < kSubs; ++s) {
            const int8_t* scs = sc + (i * kSubs + s) * kPackRows;
            if (prefetch) {  // into L2 only, as the other packed kernels do
                if (s % kSubsPerRun<Type> == 0) {
                    const uint8_t* q = qs + (i * kSubs + s) / kSubsPerRun<Type> * kRunBytes<Type>;
                    for (int t = 0; t < kRunBytes<Type> / 64; ++t) request_ahead<1, NC>(q + t * 64, prefetch);
                }
                if (s % 4 == 0) request_ahead<3, NC>(scs, prefetch);
            }
            __m128i s8 = _mm_load_si128((const __m128i*)scs), w8 = s8;  // w8: what the bsums are taken by
            if constexpr (kMin<Type>) {  // Q2_K: the scale in the low nibble, the minimum in the high one
                const __m128i low = _mm_set1_epi8(15);
                w8 = _mm_and_si128(_mm_srli_epi16(s8, 4), low);
                s8 = _mm_and_si128(s8, low);
            }
            const __m256i scale[2] = {_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8)),   // (sc_j, sc_j) in lane j
                                      _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(s8, s8))};
            const __m256i w[2] = {_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(w8, w8)),
                                  _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(w8, w8))};
            for (int h = 0; h < 2; ++h) {
                __m256i piece[4];
                unpack_sub_block_half<Type>(qs, i, s, h, piece);
                for (int c = 0; c < NC; ++c) {
                    const int8_t* aq = act[c][i].qs + 16 * s;
                    const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(piece[0], bcast4(aq)),
                                                         _mm256_maddubs_epi16(piece[1], bcast4(aq + 4)));
                    const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(piece[2], bcast4(aq + 8)),
                                                         _mm256_maddubs_epi16(piece[3], bcast4(aq + 12)));
                    const __m256i bsum = _mm256_set1_epi32((int32_t)(uint16_t)act[c][i].bsums[s]);  // (bsum, 0)
                    isum[c][h] = _mm256_add_epi32(isum[c][h], _mm256_add_epi32(_mm256_madd_epi16(p01, scale[h]),
                                                                               _mm256_madd_epi16(p23, scale[h])));
                    offs[c][h] = _mm256_add_epi32(offs[c][h], _mm256_madd_epi16(w[h], bsum));
                }
            }
        }
        for (int h = 0; h < 2; ++h) {
            const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(d + i * kPackRows + 8 * h)));
            for (int c = 0; c < NC; ++c) {
                const __m256i offset = _mm256_slli_epi32(offs[c][h], kOffsetShift<Type>);
                const __m256i sum = kMin<Type> ? isum[c][h] : _mm256_sub_epi32(isum[c][h], offset);
                const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(act[c][i].d));
                acc[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), dd, acc[c][h]);
            }
            if constexpr (kMin<Type>) {
                const __m256 mw = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(dmin + i * kPackRows + 8 * h)));
                for (int c = 0; c < NC; ++c) {
                    const __m256 dm = _mm256_mul_ps(mw, _mm256_set1_ps(act[c][i].d));
                    acc_m[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(offs[c][h]), dm, acc_m[c][h]);
                }
            }
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int h = 0; h < 2; ++h)
            _mm256_storeu_ps(y + c * ldy + 8 * h, kMin<Type> ? _mm256_sub_ps(acc[c][h], acc_m[c][h]) : acc[c][h]);
}

template <uint32_t Type>
void gemm_packed(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                 float* y, int64_t ldy) {
    run_packed_superblocks<kCols, Type>(k, m, n, w, w_stride, a, a_stride, y, ldy,
                                        [](auto nc, auto&&... args) { tile<Type, decltype(nc)::value>(args...); });
}

}  // namespace

void fill_gemm_packed_fast_q236k_avx2(KernelTable& t) {
    t.types[TYPE_Q2_K].gemm_16row_groups = gemm_packed<TYPE_Q2_K>;
    t.types[TYPE_Q3_K].gemm_16row_groups = gemm_packed<TYPE_Q3_K>;
    t.types[TYPE_Q6_K].gemm_16row_groups = gemm_packed<TYPE_Q6_K>;
}

}  // namespace ei
