// AVX-512 VNNI GEMV/GEMM over weights repacked into 16-row groups (cpu/repack.h has the layout
// and the float orders): Q4_0, and Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL in FloatOrder::fast, in their own order
// (Q3_K's and Q6_K's, also in FloatOrder::fast, are in gemm_packed_q236k_avx512.cpp)
// (bit for bit the scalar reference in cpu/repack.cpp, as the AVX2 kernels in
// gemm_packed_avx2.cpp); Q4_1 and Q8_0 in the order of this table's vec_dot (bit for bit).
//
// Q4_0. A 512-bit register holds a whole group's 4-byte piece of a block: qs[i][t] is 16 rows x
// 4 bytes, so after `& 15` and `>> 4 & 15` a block is eight registers of u8 values, row j in int32
// lane j. Per activation column, eight VPDPBUSD against the column's 4-byte groups broadcast
// (signed q8 values), started from the column's -8 * sum(q_a), give the 16 rows' exact block sums;
// one convert, one multiply (d_w * d_a) and one FMA finish 16 outputs. The AVX2 kernel needs
// about three times the instructions for the same 16 outputs (no VNNI, 8 rows a register).
// The fast order's other types go through the same tile: Q4_1 and Q5_1 add their m_w * s_a chain;
// Q8_0's signed bytes go in as q_w + 128, corrected by -128 * sum(q_a), and so do IQ4_NL's table
// values (a VPSHUFB of the nibbles); Q5_0's and Q5_1's nibbles take their fifth bits (values
// 0..31), Q5_0's corrected by -16 * sum(q_a). VPDPBUSD accumulates in int32 without saturating,
// so every block sum is exact whatever the order of its additions.
// Decode (a few columns) streams each group once from memory, the next one requested ahead.
// Prefill unpacks a group once into a small buffer (L1) and runs panels of 8 columns over it.
//
// Q4_1 and Q8_0. vec_dot (cpu/x86/quants_256.h) keeps per row 8 float lanes, lane l the exact
// sum over bytes 4l..4l+3 of each block's unpacked values times d_w * d_a, and reduces them at
// the end as hsum_float_8 does (Q4_1 adds its m_w * s_a chain). Here lane l of the 16 rows of a
// group is register acc[l], one row per register lane: the same FMAs in the same order, 16 rows
// at once. Decode batches (up to kSmallBatchMax columns) pass over a group held in L1 two columns
// at a time (each piece loaded and unpacked once for both; eight lane registers a column leave no
// room for a third); prompt chunks go through the tiled GEMM (cpu/x86/gemm_avx512.cpp) reading the
// groups.
#include <immintrin.h>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -Wall at -O3
// then reports as maybe-uninitialized inside the headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "cpu/x86/gemm_avx512.h"
#include "cpu/x86/iq4_biased.h"
#include "cpu/x86/kernel_function.h"
#include "cpu/x86/request_ahead.h"
#include "quant/blocks.h"

namespace ei {
namespace {

constexpr int kCols = 8;  // activation columns per panel

// The packed types in their own order: the activation block type, the 4-byte pieces of a block,
// the integer correction per activation block (the stored values' offset times sum(q_a)), and
// whether a minimum chain follows (Q4_1, Q5_1).
template <uint32_t Type> struct Own;
template <> struct Own<TYPE_Q4_0> {
    using Act = block_q8_0;
    static constexpr int kPieces = 4, kOffset = 8;
    static constexpr bool kMin = false;
};
template <> struct Own<TYPE_Q4_1> {
    using Act = block_q8_1;
    static constexpr int kPieces = 4, kOffset = 0;
    static constexpr bool kMin = true;
};
template <> struct Own<TYPE_Q5_0> {  // the 5-bit values 0..31 go in as u8, their offset 16 corrected
    using Act = block_q8_0;
    static constexpr int kPieces = 4, kOffset = 16;
    static constexpr bool kMin = false;
};
template <> struct Own<TYPE_Q5_1> {  // Q5_0's values, no offset; Q4_1's minimums
    using Act = block_q8_1;
    static constexpr int kPieces = 4, kOffset = 0;
    static constexpr bool kMin = true;
};
template <> struct Own<TYPE_Q8_0> {  // the weights go in as q_w + 128 (u8, as VPDPBUSD wants)
    using Act = block_q8_0;
    static constexpr int kPieces = 8, kOffset = 128;
    static constexpr bool kMin = false;
};
template <> struct Own<TYPE_IQ4_NL> {  // the nibbles' table values go in as value + 128
    using Act = block_q8_0;
    static constexpr int kPieces = 4, kOffset = 128;
    static constexpr bool kMin = false;
};

// One activation block as the tile uses it.
struct ActBlock {
    float d;       // d_a
    float s;       // Q4_1, Q5_1: the q8_1 block's s (d_a * sum(q_a))
    int32_t corr;  // -offset * sum(q_a): the stored values' offset, applied to the integer sum
};

// [n][nb] ActBlocks for the n activation rows.
template <uint32_t Type>
void prepare_activations(const uint8_t* a, size_t a_stride, int64_t n, int64_t nb, ActBlock* out) {
    using Act = typename Own<Type>::Act;
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t c = 0; c < n; ++c) {
        const Act* x = reinterpret_cast<const Act*>(a + c * a_stride);
        for (int64_t i = 0; i < nb; ++i) {
            int32_t sum = 0;
            if (Own<Type>::kOffset) {  // sum(q): VPDPBUSD of ones (u8) against the values (s8) gives 8 lane sums.
                const __m256i q = _mm256_loadu_si256((const __m256i*)x[i].qs);
                const __m256i s8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q);
                const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
                const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
                sum = _mm_cvtsi128_si32(s2) + _mm_extract_epi32(s2, 1);
            }
            float s = 0.0f;
            if constexpr (Own<Type>::kMin) s = _cvtsh_ss(x[i].s);
            out[c * nb + i] = {_cvtsh_ss(x[i].d), s, -Own<Type>::kOffset * sum};
        }
    }
}

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// Block i's eight registers of u8 values (wq[t]: elements 4t..4t+3 of the 16 rows; for the 4-bit
// types, t >= 4: the high nibbles, elements 16 + 4(t - 4)..; for Q8_0 the bytes + 128; for Q5_0
// and Q5_1 the nibbles with their fifth bits from qh, 0..31).
//
// The fifth bits: the 16 bytes qh[i][t] (one a row) are copied to the four 128-bit lanes and
// each row's byte to its int32 lane's 4 bytes (VPSHUFB within a lane: byte p takes byte p / 4, so
// lane L holds rows 4L..4L+3, as the pieces do); byte b of a row tests bit b (low nibble, element
// 4t + b) or bit 4 + b (high nibble, element 16 + 4t + b) into a mask, under which 16 is added.
template <uint32_t Type>
inline void unpack_block(const uint8_t* qs, const uint8_t* qh, int64_t i, __m512i* wq) {
    if constexpr (Type == TYPE_Q8_0) {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        for (int t = 0; t < 8; ++t) wq[t] = _mm512_xor_si512(_mm512_load_si512((const void*)(qs + (i * 8 + t) * 64)), flip);
        return;
    }
    const __m512i low = _mm512_set1_epi8(15);
    for (int t = 0; t < 4; ++t) {
        const __m512i v = _mm512_load_si512((const void*)(qs + (i * 4 + t) * 64));
        wq[t] = _mm512_and_si512(v, low);
        wq[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    if constexpr (Type == TYPE_IQ4_NL) {  // nibble -> table value + 128, by VPSHUFB in each 128-bit lane
        const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i*)kIq4nlBiased.v));
        for (int t = 0; t < 8; ++t) wq[t] = _mm512_shuffle_epi8(table, wq[t]);
    }
    if constexpr (packed_has_fifth_bits(Type)) {
        const __m512i spread = _mm512_set_epi32(0x0f0f0f0f, 0x0e0e0e0e, 0x0d0d0d0d, 0x0c0c0c0c,  // byte p: p / 4
                                                0x0b0b0b0b, 0x0a0a0a0a, 0x09090909, 0x08080808,
                                                0x07070707, 0x06060606, 0x05050505, 0x04040404,
                                                0x03030303, 0x02020202, 0x01010101, 0x00000000);
        const __m512i bit_lo = _mm512_set1_epi32(0x08040201), bit_hi = _mm512_set1_epi32((int)0x80402010);
        const __m512i sixteen = _mm512_set1_epi8(16);
        for (int t = 0; t < 4; ++t) {
            const __m512i h = _mm512_shuffle_epi8(
                _mm512_broadcast_i32x4(_mm_load_si128((const __m128i*)(qh + (i * 4 + t) * kPackRows))), spread);
            wq[t] = _mm512_mask_add_epi8(wq[t], _mm512_test_epi8_mask(h, bit_lo), wq[t], sixteen);
            wq[t + 4] = _mm512_mask_add_epi8(wq[t + 4], _mm512_test_epi8_mask(h, bit_hi), wq[t + 4], sixteen);
        }
    }
}

// The exact block sum of the 16 rows against one column's block: two chains of four VPDPBUSD
// (elements 0..15 and 16..31), so that a lone column is not one chain of eight dependent ones.
inline __m512i block_sums(const __m512i* wq, const int8_t* aq, int32_t corr) {
    __m512i lo = _mm512_set1_epi32(corr), hi = _mm512_setzero_si512();
    for (int t = 0; t < 4; ++t) {
        lo = _mm512_dpbusd_epi32(lo, wq[t], bcast4(aq + 4 * t));
        hi = _mm512_dpbusd_epi32(hi, wq[t + 4], bcast4(aq + 16 + 4 * t));
    }
    return _mm512_add_epi32(lo, hi);
}

inline __m512 scales16(const uint16_t* h) { return _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)h)); }

// One group's 16 rows x NC columns, the weights read from the group `grp` (or, when kUnpacked,
// its values from `unpacked`: nb blocks of eight 64-byte registers). With prefetch > 0, requests
// the same lines `prefetch` bytes on (the next group's: a decode batch of more than one panel, a
// draft of 8 and its token, still streams the weights from memory).
template <uint32_t Type, int NC, bool kUnpacked>
void tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const uint8_t* unpacked,
          const typename Own<Type>::Act* const* act, const ActBlock* const* ab, float* y, int64_t ldy,
          size_t prefetch) {
    constexpr bool kMin = Own<Type>::kMin;
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const uint16_t* mw = reinterpret_cast<const uint16_t*>(grp + lay.m);
    const uint8_t* qs = grp + lay.qs;
    const uint8_t* qh = grp + lay.qh;  // Q5_0, Q5_1
    __m512 acc[NC], acc_m[kMin ? NC : 1];
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
    for (auto& v : acc_m) v = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const __m512 dw = scales16(d + i * kPackRows);
        __m512i wq[8];
        if (prefetch) {  // the pieces into L2 only (requests into L1 throttled the stream), the scales into L1
            for (int t = 0; t < Own<Type>::kPieces; ++t)
                request_ahead<1, NC>(qs + (i * Own<Type>::kPieces + t) * 64, prefetch);
            if (packed_has_fifth_bits(Type)) request_ahead<1, NC>(qh + i * 64, prefetch);  // a block's qh: one line
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
            if (kMin) request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(mw + i * kPackRows), prefetch);
        }
        if (kUnpacked) {
            for (int t = 0; t < 8; ++t) wq[t] = _mm512_load_si512((const void*)(unpacked + (i * 8 + t) * 64));
        } else {
            unpack_block<Type>(qs, qh, i, wq);
        }
        for (int c = 0; c < NC; ++c) {
            const __m512i isum = block_sums(wq, act[c][i].qs, ab[c][i].corr);
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(ab[c][i].d));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc[c]);
        }
        if constexpr (kMin) {
            const __m512 mv = scales16(mw + i * kPackRows);
            for (int c = 0; c < NC; ++c) acc_m[c] = _mm512_fmadd_ps(mv, _mm512_set1_ps(ab[c][i].s), acc_m[c]);
        }
    }
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(y + c * ldy, kMin ? _mm512_add_ps(acc[c], acc_m[c]) : acc[c]);
}

template <uint32_t Type, bool kUnpacked>
void run_panel(int nc, int64_t nb, const uint8_t* grp, const PackedLayout& lay, const uint8_t* unpacked,
               const typename Own<Type>::Act* const* act, const ActBlock* const* ab, float* y, int64_t ldy,
               size_t prefetch) {
    switch (nc) {
        case 8: return tile<Type, 8, kUnpacked>(nb, grp, lay, unpacked, act, ab, y, ldy, prefetch);
        case 7: return tile<Type, 7, kUnpacked>(nb, grp, lay, unpacked, act, ab, y, ldy, prefetch);
        case 6: return tile<Type, 6, kUnpacked>(nb, grp, lay, unpacked, act, ab, y, ldy, prefetch);
        case 5: return tile<Type, 5, kUnpacked>(nb, grp, lay, unpacked, act, ab, y, ldy, prefetch);
        case 4: return tile<Type, 4, kUnpacked>(nb, grp, lay, unpacked, act, ab, y, ldy, prefetch);
        case 3: return tile<Type, 3, kUnpacked>(nb, grp, lay, unpacked, act, ab, y, ldy, prefetch);
        case 2: return tile<Type, 2, kUnpacked>(nb, grp, lay, unpacked, act, ab, y, ldy, prefetch);
        default: return tile<Type, 1, kUnpacked>(nb, grp, lay, unpacked, act, ab, y, ldy, prefetch);
    }
}

// The packed GEMV/GEMM in the type's own order (Q4_0; the others in FloatOrder::fast).
template <uint32_t Type>
void gemm_packed_own(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                     size_t a_stride, float* y, int64_t ldy) {
    using Act = typename Own<Type>::Act;
    const int64_t nb = k / QK4_0;
    const PackedLayout lay = packed_layout(Type, k);
    const uint8_t* a8 = static_cast<const uint8_t*>(a);
    thread_local std::vector<ActBlock> act_blocks;  // [n][nb]
    if ((int64_t)act_blocks.size() < n * nb) act_blocks.resize(n * nb);
    prepare_activations<Type>(a8, a_stride, n, nb, act_blocks.data());
    // More than one panel: a group's blocks are unpacked once, not once per panel.
    const bool unpack_once = n > kCols;
    struct alignas(64) Register { uint8_t bytes[64]; };  // (a vector of __m512i would drop its alignment)
    thread_local std::vector<Register> unpacked;  // [nb][8]
    if (unpack_once && (int64_t)unpacked.size() < nb * 8) unpacked.resize(nb * 8);
    const uint8_t* unpacked_bytes = reinterpret_cast<const uint8_t*>(unpacked.data());
    const Act* cols[kCols];
    const ActBlock* abs[kCols];
    const int64_t groups = m / kPackRows;
    for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* grp = static_cast<const uint8_t*>(w) + g * w_stride;
        const size_t pf = w_stride;  // the next group, requested ahead (past the last one too: cpu/repack.h)
        if (unpack_once) {
            for (int64_t i = 0; i < nb; ++i)
                unpack_block<Type>(grp + lay.qs, grp + lay.qh, i, reinterpret_cast<__m512i*>(unpacked.data() + i * 8));
        }
        for_each_panel(n, kCols, [&](int64_t p, int64_t c0, int nc) {
            for (int c = 0; c < nc; ++c) {
                cols[c] = reinterpret_cast<const Act*>(a8 + (c0 + c) * a_stride);
                abs[c] = act_blocks.data() + (c0 + c) * nb;
            }
            float* yt = y + c0 * ldy + g * kPackRows;
            if (unpack_once)   // the first panel requests the next group, a block at a time as it goes
                run_panel<Type, true>(nc, nb, grp, lay, unpacked_bytes, cols, abs, yt, ldy, p == 0 ? pf : 0);
            else
                run_panel<Type, false>(nc, nb, grp, lay, nullptr, cols, abs, yt, ldy, pf);
        });
    }
}

// ---- Q4_1 and Q8_0, in vec_dot's float order ------------------------------------------------

// hsum_float_8 (cpu/x86/quants_256.h) of 16 rows' lanes at once: its shuffles pair lane l with
// l + 4, then l with l + 2, then 0 with 1.
inline __m512 sum_lanes_in_hsum_order(const __m512* a) {
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[4], a[0]), _mm512_add_ps(a[6], a[2])),
                         _mm512_add_ps(_mm512_add_ps(a[5], a[1]), _mm512_add_ps(a[7], a[3])));
}

// Q4_1: the 16 rows of one group x NC activation columns (block_q8_1) into y[c][0..15]: each
// piece of the group loaded and split into nibbles once for the NC columns (NC <= 2: eight lane
// registers a column).
template <int NC>
EI_KERNEL_FUNCTION
void gemv_q4_1(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const block_q8_1* const* act, float* const* y,
               size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const uint16_t* mw = reinterpret_cast<const uint16_t*>(grp + lay.m);
    const uint8_t* qs = grp + lay.qs;
    const __m512i low = _mm512_set1_epi8(15);
    __m512 acc[NC][8], summs[NC], dd[NC];
    for (int c = 0; c < NC; ++c) {
        summs[c] = _mm512_setzero_ps();
        for (auto& v : acc[c]) v = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
        if (prefetch)
            for (int t = 0; t < 4; ++t) request_ahead<3, NC>(qs + (i * 4 + t) * 64, prefetch);
        const __m512 mv = scales16(mw + i * kPackRows), dw = scales16(d + i * kPackRows);
        for (int c = 0; c < NC; ++c) {
            summs[c] = _mm512_fmadd_ps(mv, _mm512_set1_ps(_cvtsh_ss(act[c][i].s)), summs[c]);
            dd[c] = _mm512_mul_ps(dw, _mm512_set1_ps(_cvtsh_ss(act[c][i].d)));
        }
        for (int t = 0; t < 4; ++t) {
            const __m512i v = _mm512_load_si512((const void*)(qs + (i * 4 + t) * 64));
            const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            for (int c = 0; c < NC; ++c) {
                const int8_t* aq = act[c][i].qs;
                const __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, bcast4(aq + 4 * t));
                const __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, bcast4(aq + 16 + 4 * t));
                acc[c][t] = _mm512_fmadd_ps(dd[c], _mm512_cvtepi32_ps(s0), acc[c][t]);
                acc[c][t + 4] = _mm512_fmadd_ps(dd[c], _mm512_cvtepi32_ps(s1), acc[c][t + 4]);
            }
        }
    }
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(y[c], _mm512_add_ps(sum_lanes_in_hsum_order(acc[c]), summs[c]));
}

// Q8_0's activation side, once per column: for block i, lane l's -128 * sum(q_a[4l .. 4l + 3]).
// The weights go in as q_w + 128 (u8, as VPDPBUSD wants), so a lane's sum((q_w + 128) * q_a) less
// this is sum(q_w * q_a): vec_dot's integer (its sign trick agrees wherever q_a != -128, which
// the q8_0 quantizer never gives).
void q8_0_lane_offsets(const block_q8_0* act, int64_t nb, int32_t* out) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i q = _mm256_loadu_si256((const __m256i*)act[i].qs);
        const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q);
        _mm256_storeu_si256((__m256i*)(out + i * 8), _mm256_mullo_epi32(sums, _mm256_set1_epi32(-128)));
    }
}

// Q8_0: the 16 rows of one group x NC activation columns (block_q8_0) into y[c][0..15]; offsets
// from q8_0_lane_offsets. Each piece loaded once for the NC columns (NC <= 2).
template <int NC>
EI_KERNEL_FUNCTION
void gemv_q8_0(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const block_q8_0* const* act,
               const int32_t* const* offsets, float* const* y, size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const uint8_t* qs = grp + lay.qs;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[NC][8], dd[NC];
    for (int c = 0; c < NC; ++c)
        for (auto& v : acc[c]) v = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        if (prefetch)
            for (int t = 0; t < 8; ++t) request_ahead<3, NC>(qs + (i * 8 + t) * 64, prefetch);
        const __m512 dw = scales16(d + i * kPackRows);
        for (int c = 0; c < NC; ++c) dd[c] = _mm512_mul_ps(dw, _mm512_set1_ps(_cvtsh_ss(act[c][i].d)));
        for (int t = 0; t < 8; ++t) {
            const __m512i v = _mm512_xor_si512(_mm512_load_si512((const void*)(qs + (i * 8 + t) * 64)), flip);
            for (int c = 0; c < NC; ++c) {
                const __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(offsets[c][i * 8 + t]), v,
                                                      bcast4(act[c][i].qs + 4 * t));
                acc[c][t] = _mm512_fmadd_ps(dd[c], _mm512_cvtepi32_ps(s), acc[c][t]);
            }
        }
    }
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(y[c], sum_lanes_in_hsum_order(acc[c]));
}

// Columns c0 and c0 + 1 (or c0 alone, when NC = 1) of one group.
template <uint32_t Type, int NC>
void group_columns(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const uint8_t* a8, size_t a_stride,
                   const int32_t* offsets, int64_t c0, float* y, int64_t ldy, size_t prefetch) {
    float* out[NC];
    for (int c = 0; c < NC; ++c) out[c] = y + (c0 + c) * ldy;
    if constexpr (Type == TYPE_Q8_0) {
        const block_q8_0* act[NC];
        const int32_t* off[NC];
        for (int c = 0; c < NC; ++c) {
            act[c] = reinterpret_cast<const block_q8_0*>(a8 + (c0 + c) * a_stride);
            off[c] = offsets + (c0 + c) * nb * 8;
        }
        gemv_q8_0<NC>(nb, grp, lay, act, off, out, prefetch);
    } else {
        const block_q8_1* act[NC];
        for (int c = 0; c < NC; ++c) act[c] = reinterpret_cast<const block_q8_1*>(a8 + (c0 + c) * a_stride);
        gemv_q4_1<NC>(nb, grp, lay, act, out, prefetch);
    }
}

template <uint32_t Type>
void gemm_packed_exact(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                       size_t a_stride, float* y, int64_t ldy) {
    if (n > kSmallBatchMax) return gemm_grouped_avx512(Type, k, m, n, w, w_stride, a, a_stride, y, ldy);
    const int64_t nb = k / 32, groups = m / kPackRows;
    const PackedLayout lay = packed_layout(Type, k);
    const uint8_t* a8 = static_cast<const uint8_t*>(a);
    thread_local std::vector<int32_t> offsets;  // Q8_0: [n][nb][8]
    if (Type == TYPE_Q8_0) {
        if ((int64_t)offsets.size() < n * nb * 8) offsets.resize(n * nb * 8);
        for (int64_t c = 0; c < n; ++c)
            q8_0_lane_offsets(reinterpret_cast<const block_q8_0*>(a8 + c * a_stride), nb, offsets.data() + c * nb * 8);
    }
    for (int64_t g = 0; g < groups; ++g) {  // a group stays in L1 while the columns pass, two at a time
        const uint8_t* grp = static_cast<const uint8_t*>(w) + g * w_stride;
        const size_t pf = w_stride;  // the next group, requested ahead (past the last one too: cpu/repack.h)
        float* yg = y + g * kPackRows;
        int64_t c0 = 0;
        for (; c0 + 2 <= n; c0 += 2)
            group_columns<Type, 2>(nb, grp, lay, a8, a_stride, offsets.data(), c0, yg, ldy, c0 == 0 ? pf : 0);
        if (c0 < n) group_columns<Type, 1>(nb, grp, lay, a8, a_stride, offsets.data(), c0, yg, ldy, c0 == 0 ? pf : 0);
    }
}

}  // namespace

void fill_gemm_packed_avx512(KernelTable& t) {
    t.types[TYPE_Q4_0].gemm_16row_groups = gemm_packed_own<TYPE_Q4_0>;
    t.types[TYPE_Q4_1].gemm_16row_groups = gemm_packed_exact<TYPE_Q4_1>;
    t.types[TYPE_Q8_0].gemm_16row_groups = gemm_packed_exact<TYPE_Q8_0>;
}

void fill_gemm_packed_fast_avx512(KernelTable& t) {
    t.types[TYPE_Q4_1].gemm_16row_groups = gemm_packed_own<TYPE_Q4_1>;
    t.types[TYPE_Q5_0].gemm_16row_groups = gemm_packed_own<TYPE_Q5_0>;
    t.types[TYPE_Q5_1].gemm_16row_groups = gemm_packed_own<TYPE_Q5_1>;
    t.types[TYPE_Q8_0].gemm_16row_groups = gemm_packed_own<TYPE_Q8_0>;
    t.types[TYPE_IQ4_NL].gemm_16row_groups = gemm_packed_own<TYPE_IQ4_NL>;
    fill_gemm_packed_fast_q236k_avx512(t);
    fill_gemm_packed_fast_iq4xs_avx512(t);
    fill_gemm_packed_fast_q45k_avx512(t);
}

}  // namespace ei
