// AVX2 GEMV/GEMM over Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL weights repacked into 16-row groups
// (cpu/repack.h has the layout and the float orders; cpu/repack.cpp the scalar references of the
// types' own order): Q4_0, and Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL in FloatOrder::fast, in their own order (bit
// for bit the scalar reference); Q4_1 and Q5_0 in vec_dot's order (bit for bit the AVX2 vec_dot).
//
// Own order (one FMA chain per output). A 256-bit register holds 8 rows x 4 bytes of a block
// (a group is two such halves). The 4-bit types: per block and half, four 32-byte loads split
// into low and high nibbles (eight registers, the 8 rows' 32 values as u8 0..15); per activation
// column, eight VPMADDUBSW against the column's 4-byte groups broadcast (signed q8 values) give
// 16-bit pair sums, added up in 16 bits (each pair sum is at most 2 * 15 * 128 = 3840 in
// magnitude, eight of them at most 30720 < 2^15, so nothing saturates), then one VPMADDWD against
// ones gives the 8 rows' exact block sums (Q4_0 then adds its -8 * sum(q_a)). Q8_0's weights are
// signed, and VPMADDUBSW wants one operand unsigned: each 32-byte piece goes in as |q_w| (u8), its
// sign moved onto the broadcast activation bytes (VPSIGNB), as ggml's mul_sum_i8_pairs does. With
// both in [-127, 127] (all the quantizers give) a pair sum is at most 2 * 127 * 127 = 32258, so it
// cannot saturate, but two can: each piece's pair sums go to 32 bits (VPMADDWD) at once. (A weight
// of -128 still works, |q_w| = 128 as u8; an activation of -128 against a negative weight would
// wrap in VPSIGNB. The +128 offset would saturate: 2 * 255 * 127 > 2^15.) Q5_0's and Q5_1's
// nibbles take their fifth bits from qh (values 0..31, unsigned; Q5_0's less 16 * sum(q_a) after);
// their pair sums are up to 2 * 31 * 128 = 7936, so only four add up in 16 bits (block_sums). Then
// one convert, one multiply (d_w * d_a) and one FMA finish 8 outputs; Q4_1 and Q5_1 add their
// m_w * s_a chain. vec_dot
// spends about as much per output as this spends per 8.
//
// Decode (one column; Q8_0 up to two) passes over both halves of a group at once, so that each
// line is consumed as it arrives and the stream from memory never pauses, the next group
// requested ahead. Wider panels (up to 4 columns: what the 16 registers hold beside the unpacked
// block) take one half per pass, the group staying in L1 while they pass; Q5_0 and Q5_1, whose
// values cost more to form than the products that use them, form them once per group into a
// buffer when more than one panel passes. Each output is its own chain, so its bits do not depend on the panel it
// falls in.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/fp16_table.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "cpu/x86/fifth_bits_avx2.h"
#include "cpu/x86/gemm_avx2.h"
#include "cpu/x86/kernel_function.h"
#include "cpu/x86/request_ahead.h"
#include "quant/blocks.h"

namespace ei {
namespace {

constexpr int kCols = 4;   // activation columns per panel
constexpr int kHalf = 8;   // rows per 256-bit register

// The packed types in their own order: the activation block type, the 4-byte pieces of a block,
// the stored values' offset (its -offset * sum(q_a) corrects the integer sum), the widest panel
// that takes both halves of a group in one pass (run_panel), and whether a minimum chain follows
// (Q4_1).
template <uint32_t Type> struct Own;
template <> struct Own<TYPE_Q4_0> {
    using Act = block_q8_0;
    static constexpr int kPieces = 4, kOffset = 8, kOnePassCols = 1;
    static constexpr bool kMin = false;
};
template <> struct Own<TYPE_Q4_1> {
    using Act = block_q8_1;
    static constexpr int kPieces = 4, kOffset = 0, kOnePassCols = 1;
    static constexpr bool kMin = true;
};
template <> struct Own<TYPE_Q5_0> {  // the 5-bit values 0..31 go in unsigned, their offset 16 corrected
    using Act = block_q8_0;
    static constexpr int kPieces = 4, kOffset = 16, kOnePassCols = 1;
    static constexpr bool kMin = false;
};
template <> struct Own<TYPE_Q5_1> {  // Q5_0's values, no offset; Q4_1's minimums
    using Act = block_q8_1;
    static constexpr int kPieces = 4, kOffset = 0, kOnePassCols = 1;
    static constexpr bool kMin = true;
};
template <> struct Own<TYPE_Q8_0> {  // signed weights (sign transfer, above): no offset
    using Act = block_q8_0;
    static constexpr int kPieces = 8, kOffset = 0, kOnePassCols = 2;
    static constexpr bool kMin = false;
};
template <> struct Own<TYPE_IQ4_NL> {  // the nibbles' signed table values, by sign transfer as Q8_0's
    using Act = block_q8_0;
    static constexpr int kPieces = 4, kOffset = 0, kOnePassCols = 1;
    static constexpr bool kMin = false;
};

// One activation block as the tile uses it.
struct ActBlock {
    float d;       // d_a
    float s;       // Q4_1: the q8_1 block's s
    int32_t corr;  // -offset * sum(q_a): the stored values' offset, applied to the integer sum
};

// [n][nb] ActBlocks for the n activation rows.
template <uint32_t Type>
void prepare_activations(const uint8_t* a, size_t a_stride, int64_t n, int64_t nb, ActBlock* out) {
    using Act = typename Own<Type>::Act;
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t c = 0; c < n; ++c) {
        const Act* x = reinterpret_cast<const Act*>(a + c * a_stride);
        for (int64_t i = 0; i < nb; ++i) {
            int32_t sum = 0;
            if (Own<Type>::kOffset) {
                // sum(q) = sum(q + 128 as u8) - 32 * 128, the u8 sum by VPSADBW against zero.
                const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)x[i].qs), bias);
                const __m256i s4 = _mm256_sad_epu8(u, _mm256_setzero_si256());
                const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
                sum = (int32_t)(_mm_cvtsi128_si32(s2) + _mm_extract_epi32(s2, 2)) - 32 * 128;
            }
            float s = 0.0f;
            if constexpr (Own<Type>::kMin) s = _cvtsh_ss(x[i].s);
            out[c * nb + i] = {_cvtsh_ss(x[i].d), s, -Own<Type>::kOffset * sum};
        }
    }
}

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Q5_0, Q5_1: piece t of block i of a half (qs, qh: the half's first piece and fifth bits) as the 8
// rows' 5-bit values, elements 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi): the nibbles with their
// fifth bits (the half's 8 bytes qh[i][t][8h..8h+7], one a row) added.
inline void unpack_5bit_piece(const uint8_t* qs, const uint8_t* qh, int64_t i, int t, __m256i& lo, __m256i& hi) {
    const __m256i low = _mm256_set1_epi8(15);
    __m256i lo16, hi16;
    fifth_bits_8rows(qh + (i * 4 + t) * kPackRows, lo16, hi16);
    const __m256i v = _mm256_load_si256((const __m256i*)(qs + (i * 4 + t) * 64));
    lo = _mm256_or_si256(_mm256_and_si256(v, low), lo16);
    hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), hi16);
}

// The exact block-i sums of the half's 8 rows (qs: the half's first piece; qh: its first fifth
// bits, Q5_0 and Q5_1) against NC columns. With kUnpacked (those two): the half's block already
// unpacked at `unpacked` (unpack_5bit_piece's lo of pieces 0..3, then their hi, 32 bytes each).
template <uint32_t Type, int NC, bool kUnpacked>
inline void block_sums(const uint8_t* qs, const uint8_t* qh, const uint8_t* unpacked, int64_t i,
                       const typename Own<Type>::Act* const* act, const ActBlock* const* ab, __m256i* isum) {
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (packed_has_fifth_bits(Type)) {
        // The block's values formed (or loaded) once for the NC columns. A pair sum is at most
        // 2 * 31 * 128 = 7936 in magnitude, so four add up in 16 bits (31744 < 2^15) but eight
        // could saturate: the low and the high elements' sums (four pieces each) widen to 32 bits
        // apart.
        __m256i wq[8];  // wq[t], wq[4 + t]: piece t's lo and hi
        for (int t = 0; t < 4; ++t) {
            if constexpr (kUnpacked) {
                wq[t] = _mm256_load_si256((const __m256i*)(unpacked + t * 32));
                wq[4 + t] = _mm256_load_si256((const __m256i*)(unpacked + (4 + t) * 32));
            } else {
                unpack_5bit_piece(qs, qh, i, t, wq[t], wq[4 + t]);
            }
        }
        for (int c = 0; c < NC; ++c) {
            const int8_t* aq = act[c][i].qs;
            __m256i p_lo = _mm256_maddubs_epi16(wq[0], bcast4(aq));
            __m256i p_hi = _mm256_maddubs_epi16(wq[4], bcast4(aq + 16));
            for (int t = 1; t < 4; ++t) {
                p_lo = _mm256_add_epi16(p_lo, _mm256_maddubs_epi16(wq[t], bcast4(aq + 4 * t)));
                p_hi = _mm256_add_epi16(p_hi, _mm256_maddubs_epi16(wq[4 + t], bcast4(aq + 16 + 4 * t)));
            }
            isum[c] = _mm256_add_epi32(_mm256_madd_epi16(p_lo, ones), _mm256_madd_epi16(p_hi, ones));
            if (Own<Type>::kOffset) isum[c] = _mm256_add_epi32(isum[c], _mm256_set1_epi32(ab[c][i].corr));
        }
    } else if constexpr (Type == TYPE_Q8_0) {
        // Piece by piece (each loaded once for the NC columns): |q_w| x (q_a with q_w's sign).
        for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
        auto piece = [&](int t) {
            const __m256i v = _mm256_load_si256((const __m256i*)(qs + (i * 8 + t) * 64));
            const __m256i av = _mm256_sign_epi8(v, v);
            for (int c = 0; c < NC; ++c) {
                const __m256i sa = _mm256_sign_epi8(bcast4(act[c][i].qs + 4 * t), v);
                isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(av, sa), ones));
            }
        };
        if constexpr (NC >= 3) {
            // Two pieces an iteration for a wide panel: all eight unrolled, GCC hoists their loads
            // and spills the columns' float sums to the stack on every block. A decode's one or
            // two columns run fastest fully unrolled (docs/PERFORMANCE.md).
#pragma GCC unroll 2
            for (int t = 0; t < 8; ++t) piece(t);
        } else {
            for (int t = 0; t < 8; ++t) piece(t);
        }
    } else if constexpr (Type == TYPE_IQ4_NL) {
        // The nibbles looked up (VPSHUFB in each 128-bit lane) into signed values in [-127, 113],
        // then as Q8_0: |q_w| x (q_a with q_w's sign), each piece's pair sums widened at once.
        const __m256i low = _mm256_set1_epi8(15);
        const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)kIq4nlValues));
        for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
        for (int t = 0; t < 4; ++t) {
            const __m256i v = _mm256_load_si256((const __m256i*)(qs + (i * 4 + t) * 64));
            const __m256i wq[2] = {_mm256_shuffle_epi8(table, _mm256_and_si256(v, low)),
                                   _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low))};
            for (int h = 0; h < 2; ++h) {
                const __m256i av = _mm256_sign_epi8(wq[h], wq[h]);
                for (int c = 0; c < NC; ++c) {
                    const __m256i sa = _mm256_sign_epi8(bcast4(act[c][i].qs + 16 * h + 4 * t), wq[h]);
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(av, sa), ones));
                }
            }
        }
    } else {
        const __m256i low = _mm256_set1_epi8(15);
        __m256i wq[8];  // wq[t]: the rows' elements 4t..4t+3 (t < 4: low nibbles; t >= 4: high nibbles)
        for (int t = 0; t < 4; ++t) {
            const __m256i v = _mm256_load_si256((const __m256i*)(qs + (i * 4 + t) * 64));
            wq[t] = _mm256_and_si256(v, low);
            wq[t + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        }
        for (int c = 0; c < NC; ++c) {
            const int8_t* aq = act[c][i].qs;
            __m256i p0 = _mm256_maddubs_epi16(wq[0], bcast4(aq));
            __m256i p1 = _mm256_maddubs_epi16(wq[1], bcast4(aq + 4));
            for (int t = 2; t < 8; t += 2) {
                p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(wq[t], bcast4(aq + 4 * t)));
                p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(wq[t + 1], bcast4(aq + 4 * t + 4)));
            }
            isum[c] = _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones);
            if (Own<Type>::kOffset) isum[c] = _mm256_add_epi32(isum[c], _mm256_set1_epi32(ab[c][i].corr));
        }
    }
}

// Q5_0 and Q5_1, one column, both halves of a group: the block-i sums of rows 0..7 (isum[0]) and
// 8..15 (isum[1]). Piece by piece, each piece's values used as soon as they are formed: holding a half's
// eight value registers (block_sums) beside the broadcast activations made GCC spill on every
// block, and this kernel is bound by its own work. A piece's 16 fifth-bit bytes (both halves) come
// in with one broadcast load; each half picks its 8 rows' bytes out of both lanes in one shuffle.
template <uint32_t Type>
inline void block_sums_fifth_bits_one_column(const uint8_t* qs, const uint8_t* qh, int64_t i, const int8_t* aq,
                                             int32_t corr, __m256i isum[2]) {
    const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    // Half h's row r (r < 4 in the low lane, r >= 4 in the high one) at byte 8h + r of the piece's bytes.
    const __m256i spread[2] = {_mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,  //
                                                4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
                               _mm256_setr_epi8(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11,  //
                                                12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15)};
    __m256i p_lo[2], p_hi[2];
    for (int t = 0; t < 4; ++t) {
        const __m128i bytes = _mm_load_si128((const __m128i*)(qh + (i * 4 + t) * kPackRows));
        const __m256i bits = _mm256_broadcastsi128_si256(bytes);
        const __m256i a_lo = bcast4(aq + 4 * t), a_hi = bcast4(aq + 16 + 4 * t);
        for (int h = 0; h < 2; ++h) {
            __m256i lo16, hi16;
            fifth_bits_spread(_mm256_shuffle_epi8(bits, spread[h]), lo16, hi16);
            const __m256i v = _mm256_load_si256((const __m256i*)(qs + (i * 4 + t) * 64 + h * 32));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, low), lo16);
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), hi16);
            const __m256i pl = _mm256_maddubs_epi16(lo, a_lo), ph = _mm256_maddubs_epi16(hi, a_hi);
            p_lo[h] = t ? _mm256_add_epi16(p_lo[h], pl) : pl;
            p_hi[h] = t ? _mm256_add_epi16(p_hi[h], ph) : ph;
        }
    }
    for (int h = 0; h < 2; ++h) {
        isum[h] = _mm256_add_epi32(_mm256_madd_epi16(p_lo[h], ones), _mm256_madd_epi16(p_hi[h], ones));
        if (Own<Type>::kOffset) isum[h] = _mm256_add_epi32(isum[h], _mm256_set1_epi32(corr));
    }
}

inline __m256 scales8(const uint16_t* h) { return _mm256_cvtph_ps(_mm_load_si128((const __m128i*)h)); }

// Halves h0..h0+H-1 of one group (rows 8h0..8(h0+H)-1) x NC columns into y[c * ldy + ...]. With
// prefetch > 0 (and h0 = 0), requests the same lines `prefetch` bytes on (the next group's; a
// panel of one or two columns also the group after: request_ahead.h): a decode streams the groups
// from DRAM, faster when the lines are asked for ahead (cpu/matmul.cpp).
// The pieces are requested into L2 only (a group's worth of requests into L1 throttled the stream
// instead), the scales (d, m), read first, into L1. With kUnpacked (Q5_0, Q5_1), the values are read
// from `unpacked` (gemm_packed_own: [nb][2 halves][8][32 bytes]).
template <uint32_t Type, int NC, int H, bool kUnpacked>
EI_KERNEL_FUNCTION
void tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const uint8_t* unpacked, int h0,
          const typename Own<Type>::Act* const* act, const ActBlock* const* ab, float* y, int64_t ldy,
          size_t prefetch) {
    constexpr bool kMin = Own<Type>::kMin;
    constexpr int kPieces = Own<Type>::kPieces;
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp) + h0 * kHalf;
    const uint16_t* mw = reinterpret_cast<const uint16_t*>(grp + lay.m) + h0 * kHalf;
    const uint8_t* qs = grp + lay.qs + h0 * 32;
    const uint8_t* qh = grp + lay.qh + h0 * kHalf;  // Q5_0, Q5_1
    if (h0 != 0) prefetch = 0;  // the first pass requested them
    __m256 acc[H][NC], acc_m[H][kMin ? NC : 1];
    for (int h = 0; h < H; ++h) {
        for (auto& v : acc[h]) v = _mm256_setzero_ps();
        for (auto& v : acc_m[h]) v = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
        if (prefetch) {
            for (int t = 0; t < kPieces; ++t) request_ahead<1, NC>(qs + (i * kPieces + t) * 64, prefetch);
            if (packed_has_fifth_bits(Type)) request_ahead<1, NC>(qh + i * 64, prefetch);  // a block's qh: one line
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
            if (kMin) request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(mw + i * kPackRows), prefetch);
        }
        [[maybe_unused]] __m256i q5_sums[2];
        if constexpr (packed_has_fifth_bits(Type) && NC == 1 && H == 2 && !kUnpacked)
            block_sums_fifth_bits_one_column<Type>(qs, qh, i, act[0][i].qs, ab[0][i].corr, q5_sums);
        for (int h = 0; h < H; ++h) {
            __m256i isum[NC];
            const uint8_t* u = kUnpacked ? unpacked + ((i * 2 + h0 + h) * 8) * 32 : nullptr;
            if constexpr (packed_has_fifth_bits(Type) && NC == 1 && H == 2 && !kUnpacked)
                isum[0] = q5_sums[h];
            else
                block_sums<Type, NC, kUnpacked>(qs + h * 32, qh + h * kHalf, u, i, act, ab, isum);
            const __m256 dw = scales8(d + i * kPackRows + h * kHalf);
            for (int c = 0; c < NC; ++c) {
                const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(ab[c][i].d));
                acc[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), dd, acc[h][c]);
            }
            if constexpr (kMin) {
                const __m256 mv = scales8(mw + i * kPackRows + h * kHalf);
                for (int c = 0; c < NC; ++c) acc_m[h][c] = _mm256_fmadd_ps(mv, _mm256_set1_ps(ab[c][i].s), acc_m[h][c]);
            }
        }
    }
    for (int h = 0; h < H; ++h)
        for (int c = 0; c < NC; ++c)
            _mm256_storeu_ps(y + c * ldy + h * kHalf, kMin ? _mm256_add_ps(acc[h][c], acc_m[h][c]) : acc[h][c]);
}

// One group x NC columns: both halves in one pass over the blocks up to kOnePassCols columns,
// else one pass per half (the registers hold one half's sums beside the unpacked block).
template <uint32_t Type, int NC>
void run_panel(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const uint8_t* unpacked,
               const typename Own<Type>::Act* const* act, const ActBlock* const* ab, float* y, int64_t ldy,
               size_t prefetch) {
    constexpr int H = NC <= Own<Type>::kOnePassCols ? 2 : 1;
    for (int h = 0; h < 2; h += H) {
        if constexpr (packed_has_fifth_bits(Type))  // (the other types are never given an unpacked group)
            if (unpacked) {
                tile<Type, NC, H, true>(nb, grp, lay, unpacked, h, act, ab, y + h * kHalf, ldy, prefetch);
                continue;
            }
        tile<Type, NC, H, false>(nb, grp, lay, nullptr, h, act, ab, y + h * kHalf, ldy, prefetch);
    }
}

// The packed GEMV/GEMM in the type's own order (Q4_0; the others in FloatOrder::fast).
template <uint32_t Type>
void gemm_packed_own(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                     size_t a_stride, float* y, int64_t ldy) {
    using Act = typename Own<Type>::Act;
    if (Type == TYPE_Q8_0 && n == 1) {
        // One token's Q8_0 GEMV as two columns that are the same row (a_stride 0), both writing
        // the same outputs (ldy 0; each column is its own chain, so the bits are the same). From
        // L2 the one-column tile runs at about twice a core's DRAM stream, which keeps the core's
        // miss queues full and its requests dropped (cpu/x86/request_ahead.h); the two-column
        // tile runs at about the stream's rate. It decoded Q8_0 faster on Zen 4, with the
        // doubled requests too (docs/PERFORMANCE.md, "Measurements behind code choices").
        return gemm_packed_own<Type>(k, m, 2, w, w_stride, a, 0, y, 0);
    }
    const int64_t nb = k / QK4_0;
    const PackedLayout lay = packed_layout(Type, k);
    const uint8_t* a8 = static_cast<const uint8_t*>(a);
    thread_local std::vector<ActBlock> act_blocks;  // [n][nb]
    if ((int64_t)act_blocks.size() < n * nb) act_blocks.resize(n * nb);
    prepare_activations<Type>(a8, a_stride, n, nb, act_blocks.data());
    // Q5_0 and Q5_1 over more than one panel: their values (fifth bits in) are formed once per
    // group, not once per panel, into a buffer that stays in L1 while the panels pass.
    const bool unpack_once = packed_has_fifth_bits(Type) && n > kCols;
    struct alignas(32) Register { uint8_t bytes[32]; };  // (a vector of __m256i would drop its alignment)
    thread_local std::vector<Register> unpacked;       // [nb][2][8]
    if (unpack_once && (int64_t)unpacked.size() < nb * 16) unpacked.resize(nb * 16);
    const uint8_t* unpacked_bytes = unpack_once ? reinterpret_cast<const uint8_t*>(unpacked.data()) : nullptr;
    const Act* cols[kCols];
    const ActBlock* abs[kCols];
    const int64_t groups = m / kPackRows;
    for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* grp = static_cast<const uint8_t*>(w) + g * w_stride;
        const size_t pf = w_stride;  // the next group, requested ahead (past the last one too: cpu/repack.h)
        if (unpack_once)
            for (int64_t i = 0; i < nb; ++i)
                for (int h = 0; h < 2; ++h)
                    for (int t = 0; t < 4; ++t) {
                        __m256i lo, hi;
                        unpack_5bit_piece(grp + lay.qs + h * 32, grp + lay.qh + h * kHalf, i, t, lo, hi);
                        Register* r = unpacked.data() + (i * 2 + h) * 8;  // as block_sums reads it
                        _mm256_store_si256((__m256i*)r[t].bytes, lo);
                        _mm256_store_si256((__m256i*)r[4 + t].bytes, hi);
                    }
        for_each_panel(n, kCols, [&](int64_t, int64_t c0, int nc) {
            for (int c = 0; c < nc; ++c) {
                cols[c] = reinterpret_cast<const Act*>(a8 + (c0 + c) * a_stride);
                abs[c] = act_blocks.data() + (c0 + c) * nb;
            }
            const size_t pfc = c0 == 0 ? pf : 0;  // the first panel's pass requests the next group
            float* yt = y + c0 * ldy + g * kPackRows;
            switch (nc) {
                case 4: run_panel<Type, 4>(nb, grp, lay, unpacked_bytes, cols, abs, yt, ldy, pfc); break;
                case 3: run_panel<Type, 3>(nb, grp, lay, unpacked_bytes, cols, abs, yt, ldy, pfc); break;
                case 2: run_panel<Type, 2>(nb, grp, lay, unpacked_bytes, cols, abs, yt, ldy, pfc); break;
                default: run_panel<Type, 1>(nb, grp, lay, unpacked_bytes, cols, abs, yt, ldy, pfc); break;
            }
        });
    }
}

// ---- Q4_1 and Q5_0, in vec_dot's float order ------------------------------------------------
//
// vec_dot keeps, per row, 8 float lanes (lane l: elements 4l..4l+3 of every block, times
// d_w * d_a) and, for Q4_1, one m_w * s_a chain, and reduces the lanes at the end. Here lane l of
// 8 rows is register acc[l] (a row per register lane): the same FMAs, in the same order, 8 rows
// at once, and hsum_float_8's reduction becomes vertical adds in its order. A block's 4-byte
// pieces qs[i][t] give lane t (low nibbles, activation bytes 4t..4t+3) and lane t + 4 (high
// nibbles, activation bytes 16 + 4t..). The lanes' integer sums are vec_dot's exactly (no 16-bit
// pair sum can saturate), however they are formed.

// hsum_float_8 (cpu/x86/quants_256.h) of 8 rows' lanes at once: its shuffles pair lane l with
// l + 4, then l with l + 2, then 0 with 1.
inline __m256 sum_lanes_in_hsum_order(const __m256* a) {
    return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[4], a[0]), _mm256_add_ps(a[6], a[2])),
                         _mm256_add_ps(_mm256_add_ps(a[5], a[1]), _mm256_add_ps(a[7], a[3])));
}

// Requests block i's nibble lines `prefetch` bytes on (the next group's); the smaller arrays
// (d, m, qh) are left to the hardware prefetcher.
inline void prefetch_nibbles(const uint8_t* qs, int64_t i, size_t prefetch) {
    for (int t = 0; t < 4; ++t) request_ahead<3>(qs + (i * 4 + t) * 64, prefetch);
}

// Q4_1: rows 8h..8h+7 of one group x one activation column (block_q8_1) into y[0..7]. With
// prefetch > 0, the first half requests the next group's lines.
EI_KERNEL_FUNCTION
void gemv_half_q4_1(int64_t nb, const uint8_t* grp, const PackedLayout& lay, int h, const block_q8_1* act, float* y,
                    size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp) + h * kHalf;
    const uint16_t* mw = reinterpret_cast<const uint16_t*>(grp + lay.m) + h * kHalf;
    const uint8_t* qs = grp + lay.qs + h * 32;
    const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    __m256 acc[8];
    for (auto& v : acc) v = _mm256_setzero_ps();
    __m256 summs = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        if (prefetch && h == 0) prefetch_nibbles(qs, i, prefetch);
        const __m256 mv = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(mw + i * kPackRows)));
        summs = _mm256_fmadd_ps(mv, _mm256_set1_ps(fp16_to_fp32_lookup(act[i].s)), summs);
        const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(d + i * kPackRows)));
        const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(fp16_to_fp32_lookup(act[i].d)));
        for (int t = 0; t < 4; ++t) {
            const __m256i v = _mm256_load_si256((const __m256i*)(qs + (i * 4 + t) * 64));
            const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            const __m256i s0 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(lo, bcast4(act[i].qs + 4 * t)));
            const __m256i s1 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(hi, bcast4(act[i].qs + 16 + 4 * t)));
            acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s0), acc[t]);
            acc[t + 4] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s1), acc[t + 4]);
        }
    }
    _mm256_storeu_ps(y, _mm256_add_ps(sum_lanes_in_hsum_order(acc), summs));
}

// Q5_0's activation side, once per column: for block i, lane l's 16 * sum(q_a[4l .. 4l + 3]).
// With q = nibble | fifth bit << 4 in 0..31 (unsigned, as VPMADDUBSW wants), a lane's
// sum((q - 16) * q_a) = sum(q * q_a) - 16 * sum(q_a): vec_dot's integer, without its sign trick
// (which would wrap a q_a of -128; the q8_0 quantizer rounds into -127..127, so both agree).
void q5_0_lane_offsets(const block_q8_0* act, int64_t nb, int32_t* out) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i q = _mm256_loadu_si256((const __m256i*)act[i].qs);
        const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones);
        _mm256_storeu_si256((__m256i*)(out + i * 8), _mm256_slli_epi32(sums, 4));
    }
}

// Q5_0: rows 8h..8h+7 of one group x one activation column (block_q8_0) into y[0..7]; offsets
// from q5_0_lane_offsets. The fifth bits of lane t's bytes: qh[i][t][j] (row j) copied into all
// 4 bytes of row j's int32 lane (VPSHUFB), byte b keeping bit b (low nibbles) or, after a shift,
// bit b + 4 (high nibbles), which a 16-entry table (VPSHUFB again) turns into 0 or 16.
EI_KERNEL_FUNCTION
void gemv_half_q5_0(int64_t nb, const uint8_t* grp, const PackedLayout& lay, int h, const block_q8_0* act,
                    const int32_t* offsets, float* y, size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp) + h * kHalf;
    const uint8_t* qh = grp + lay.qh + h * kHalf;
    const uint8_t* qs = grp + lay.qs + h * 32;
    const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,  // rows 0-3
                                            4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);  // rows 4-7
    const __m256i bit = _mm256_set1_epi32(0x08040201);  // byte b of a lane: bit b
    const __m256i fifth = _mm256_setr_epi8(0, 16, 16, 0, 16, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0,  // [1, 2, 4, 8] = 16
                                           0, 16, 16, 0, 16, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0);
    __m256 acc[8];
    for (auto& v : acc) v = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        if (prefetch && h == 0) prefetch_nibbles(qs, i, prefetch);
        const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(d + i * kPackRows)));
        const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(fp16_to_fp32_lookup(act[i].d)));
        for (int t = 0; t < 4; ++t) {
            int64_t bits8;
            std::memcpy(&bits8, qh + (i * 4 + t) * kPackRows, 8);
            const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi64x(bits8), spread);
            const __m256i b0 = _mm256_shuffle_epi8(fifth, _mm256_and_si256(rep, bit));
            const __m256i b1 = _mm256_shuffle_epi8(fifth, _mm256_and_si256(_mm256_srli_epi16(rep, 4), bit));
            const __m256i v = _mm256_load_si256((const __m256i*)(qs + (i * 4 + t) * 64));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, low), b0);
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), b1);
            const __m256i p0 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(lo, bcast4(act[i].qs + 4 * t)));
            const __m256i p1 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(hi, bcast4(act[i].qs + 16 + 4 * t)));
            const __m256i s0 = _mm256_sub_epi32(p0, _mm256_set1_epi32(offsets[i * 8 + t]));
            const __m256i s1 = _mm256_sub_epi32(p1, _mm256_set1_epi32(offsets[i * 8 + t + 4]));
            acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s0), acc[t]);
            acc[t + 4] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s1), acc[t + 4]);
        }
    }
    _mm256_storeu_ps(y, sum_lanes_in_hsum_order(acc));
}

// From this many columns the tiled GEMM (rows unpacked once, 4 x 2 register tiles) is faster
// than one GEMV pass per column over a group held in L1; it computes the same bits. Below it (a
// decode batch) each group is read from memory once, ahead of use, for all the columns.
constexpr int64_t kTiledMinCols = kSmallBatchMax + 1;

template <uint32_t Type>
void gemm_packed_exact(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                       size_t a_stride, float* y, int64_t ldy) {
    if (n >= kTiledMinCols) return gemm_grouped_avx2(Type, k, m, n, w, w_stride, a, a_stride, y, ldy);
    const int64_t nb = k / 32, groups = m / kPackRows;
    const PackedLayout lay = packed_layout(Type, k);
    const uint8_t* a8 = static_cast<const uint8_t*>(a);
    thread_local std::vector<int32_t> offsets;  // Q5_0: [n][nb][8]
    if (Type == TYPE_Q5_0) {
        if ((int64_t)offsets.size() < n * nb * 8) offsets.resize(n * nb * 8);
        for (int64_t c = 0; c < n; ++c)
            q5_0_lane_offsets(reinterpret_cast<const block_q8_0*>(a8 + c * a_stride), nb, offsets.data() + c * nb * 8);
    }
    for (int64_t g = 0; g < groups; ++g) {  // a group stays in L1 while the columns pass
        const uint8_t* grp = static_cast<const uint8_t*>(w) + g * w_stride;
        const size_t pf = w_stride;  // the next group, requested ahead (past the last one too: cpu/repack.h)
        for (int64_t c = 0; c < n; ++c) {
            for (int h = 0; h < 2; ++h) {
                float* out = y + c * ldy + g * kPackRows + h * kHalf;
                if (Type == TYPE_Q5_0)
                    gemv_half_q5_0(nb, grp, lay, h, reinterpret_cast<const block_q8_0*>(a8 + c * a_stride),
                                   offsets.data() + c * nb * 8, out, pf);
                else
                    gemv_half_q4_1(nb, grp, lay, h, reinterpret_cast<const block_q8_1*>(a8 + c * a_stride), out, pf);
            }
        }
    }
}

}  // namespace

void fill_gemm_packed_avx2(KernelTable& t) {
    t.types[TYPE_Q4_0].gemm_16row_groups = gemm_packed_own<TYPE_Q4_0>;
    t.types[TYPE_Q4_1].gemm_16row_groups = gemm_packed_exact<TYPE_Q4_1>;
    t.types[TYPE_Q5_0].gemm_16row_groups = gemm_packed_exact<TYPE_Q5_0>;
}

void fill_gemm_packed_fast_avx2(KernelTable& t) {
    t.types[TYPE_Q4_1].gemm_16row_groups = gemm_packed_own<TYPE_Q4_1>;
    t.types[TYPE_Q5_0].gemm_16row_groups = gemm_packed_own<TYPE_Q5_0>;
    t.types[TYPE_Q5_1].gemm_16row_groups = gemm_packed_own<TYPE_Q5_1>;
    t.types[TYPE_Q8_0].gemm_16row_groups = gemm_packed_own<TYPE_Q8_0>;
    t.types[TYPE_IQ4_NL].gemm_16row_groups = gemm_packed_own<TYPE_IQ4_NL>;
    fill_gemm_packed_fast_q236k_avx2(t);
    fill_gemm_packed_fast_iq4xs_avx2(t);
    fill_gemm_packed_fast_q45k_avx2(t);
}

}  // namespace ei
