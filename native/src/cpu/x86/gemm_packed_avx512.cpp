// AVX-512 VNNI GEMV/GEMM over Q4_0 weights repacked into 16-row groups (cpu/repack.h has the
// layout and the float order; cpu/repack.cpp the scalar reference these kernels match bit for
// bit, as the AVX2 ones in gemm_packed_avx2.cpp do).
//
// A 512-bit register holds a whole group's 4-byte piece of a block: qs[i][t] is 16 rows x 4
// bytes, so after `& 15` and `>> 4 & 15` a block is eight registers of u8 values, row j in int32
// lane j. Per activation column, eight VPDPBUSD against the column's 4-byte groups broadcast
// (signed q8 values), started from the column's -8 * sum(q_a), give the 16 rows' exact block sums;
// one convert, one multiply (d_w * d_a) and one FMA finish 16 outputs. The AVX2 kernel needs
// about three times the instructions for the same 16 outputs (no VNNI, 8 rows a register).
//
// Decode (a few columns) streams each group once from memory, the next one requested ahead.
// Prefill unpacks a group once into a small buffer (L1) and runs panels of 8 columns over it.
#include <immintrin.h>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -Wall at -O3
// then reports as maybe-uninitialized inside the headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "quant/blocks.h"

namespace ei {
namespace {

constexpr int kCols = 8;  // activation columns per panel

// One activation block as the tile uses it.
struct ActBlock {
    float d;       // d_a
    int32_t corr;  // -8 * sum(q_a): the nibbles' offset of 8, applied to the integer sum
};

// [n][nb] ActBlocks for the n activation rows (block_q8_0).
void prepare_activations(const uint8_t* a, size_t a_stride, int64_t n, int64_t nb, ActBlock* out) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t c = 0; c < n; ++c) {
        const block_q8_0* x = reinterpret_cast<const block_q8_0*>(a + c * a_stride);
        for (int64_t i = 0; i < nb; ++i) {
            // sum(q): VPDPBUSD of ones (u8) against the values (s8) gives 8 lane sums.
            const __m256i q = _mm256_loadu_si256((const __m256i*)x[i].qs);
            const __m256i s8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q);
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
            const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            const int32_t sum = _mm_cvtsi128_si32(s2) + _mm_extract_epi32(s2, 1);
            out[c * nb + i] = {_cvtsh_ss(x[i].d), -8 * sum};
        }
    }
}

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// Block i's eight registers of u8 values (wq[t]: elements 4t..4t+3 of the 16 rows; t >= 4: the
// high nibbles, elements 16 + 4(t - 4)..).
inline void unpack_block(const uint8_t* qs, int64_t i, __m512i* wq) {
    const __m512i low = _mm512_set1_epi8(15);
    for (int t = 0; t < 4; ++t) {
        const __m512i v = _mm512_load_si512((const void*)(qs + (i * 4 + t) * 64));
        wq[t] = _mm512_and_si512(v, low);
        wq[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
}

// The exact block sum of the 16 rows against one column's block: two chains of four VPDPBUSD
// (low and high nibbles), so that a lone column is not one chain of eight dependent ones.
inline __m512i block_sums(const __m512i* wq, const int8_t* aq, int32_t corr) {
    __m512i lo = _mm512_set1_epi32(corr), hi = _mm512_setzero_si512();
    for (int t = 0; t < 4; ++t) {
        lo = _mm512_dpbusd_epi32(lo, wq[t], bcast4(aq + 4 * t));
        hi = _mm512_dpbusd_epi32(hi, wq[t + 4], bcast4(aq + 16 + 4 * t));
    }
    return _mm512_add_epi32(lo, hi);
}

// One group's 16 rows x NC columns, the weights read from `qs` (packed, or unpacked when
// `unpacked` is set: nb blocks of eight 64-byte registers). With prefetch > 0, requests the same
// lines `prefetch` bytes on (the next group's).
template <int NC, bool kUnpacked>
void tile(int64_t nb, const uint16_t* d, const uint8_t* qs, const block_q8_0* const* act, const ActBlock* const* ab,
          float* y, int64_t ldy, size_t prefetch) {
    __m512 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(d + i * kPackRows)));
        __m512i wq[8];
        if (kUnpacked) {
            for (int t = 0; t < 8; ++t) wq[t] = _mm512_load_si512((const void*)(qs + (i * 8 + t) * 64));
        } else {
            if (prefetch)
                for (int t = 0; t < 4; ++t) __builtin_prefetch(qs + (i * 4 + t) * 64 + prefetch, 0, 3);
            unpack_block(qs, i, wq);
        }
        for (int c = 0; c < NC; ++c) {
            const __m512i isum = block_sums(wq, act[c][i].qs, ab[c][i].corr);
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(ab[c][i].d));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

template <bool kUnpacked>
void run_panel(int nc, int64_t nb, const uint16_t* d, const uint8_t* qs, const block_q8_0* const* act,
               const ActBlock* const* ab, float* y, int64_t ldy, size_t prefetch) {
    switch (nc) {
        case 8: return tile<8, kUnpacked>(nb, d, qs, act, ab, y, ldy, prefetch);
        case 7: return tile<7, kUnpacked>(nb, d, qs, act, ab, y, ldy, prefetch);
        case 6: return tile<6, kUnpacked>(nb, d, qs, act, ab, y, ldy, prefetch);
        case 5: return tile<5, kUnpacked>(nb, d, qs, act, ab, y, ldy, prefetch);
        case 4: return tile<4, kUnpacked>(nb, d, qs, act, ab, y, ldy, prefetch);
        case 3: return tile<3, kUnpacked>(nb, d, qs, act, ab, y, ldy, prefetch);
        case 2: return tile<2, kUnpacked>(nb, d, qs, act, ab, y, ldy, prefetch);
        default: return tile<1, kUnpacked>(nb, d, qs, act, ab, y, ldy, prefetch);
    }
}

void gemm_packed_q4_0(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                      size_t a_stride, float* y, int64_t ldy) {
    const int64_t nb = k / QK4_0;
    const size_t qs_off = packed_layout(TYPE_Q4_0, k).qs;
    const uint8_t* a8 = static_cast<const uint8_t*>(a);
    thread_local std::vector<ActBlock> act_blocks;  // [n][nb]
    if ((int64_t)act_blocks.size() < n * nb) act_blocks.resize(n * nb);
    prepare_activations(a8, a_stride, n, nb, act_blocks.data());
    // More than one panel: a group's blocks are unpacked once, not once per panel.
    const bool unpack_once = n > kCols;
    thread_local std::vector<__m512i> unpacked;  // [nb][8]
    if (unpack_once && (int64_t)unpacked.size() < nb * 8) unpacked.resize(nb * 8);
    const block_q8_0* cols[kCols];
    const ActBlock* abs[kCols];
    const int64_t groups = m / kPackRows;
    for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* grp = static_cast<const uint8_t*>(w) + g * w_stride;
        const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
        const uint8_t* qs = grp + qs_off;
        if (unpack_once)
            for (int64_t i = 0; i < nb; ++i) unpack_block(qs, i, unpacked.data() + i * 8);
        const size_t pf = g + 1 < groups ? w_stride : 0;  // the next group, requested ahead
        for (int64_t c0 = 0; c0 < n; c0 += kCols) {
            const int nc = (int)std::min<int64_t>(kCols, n - c0);
            for (int c = 0; c < nc; ++c) {
                cols[c] = reinterpret_cast<const block_q8_0*>(a8 + (c0 + c) * a_stride);
                abs[c] = act_blocks.data() + (c0 + c) * nb;
            }
            float* yt = y + c0 * ldy + g * kPackRows;
            if (unpack_once)
                run_panel<true>(nc, nb, d, reinterpret_cast<const uint8_t*>(unpacked.data()), cols, abs, yt, ldy, 0);
            else
                run_panel<false>(nc, nb, d, qs, cols, abs, yt, ldy, pf);
        }
    }
}

}  // namespace

void fill_gemm_packed_avx512(KernelTable& t) { t.types[TYPE_Q4_0].gemm_16row_groups = gemm_packed_q4_0; }

}  // namespace ei
