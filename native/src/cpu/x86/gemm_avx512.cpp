// AVX-512 VNNI tiled GEMM for the 32-element block types (prefill: many activation columns).
//
// What is computed. y[c][r] = vec_dot(w row r, a column c) for a tile of weight rows and
// activation columns, where every output gets *exactly* the float operations of the mirrored
// vec_dot (cpu/x86/quants_256.h, which mirrors ggml's x86 kernels): per 32-element block, the
// 32 int8 products are summed into 8 int32 lanes (4 adjacent products per lane), converted to
// float, multiplied by the rounded float product d_w * d_a and FMA'd into the same lane of an
// 8-lane accumulator; q4_1/q5_1 add the minimum term m_w * s_a in a separate FMA chain; at the
// end the 8 lanes are reduced by hsum_float_8 and the minimum term added. So the prefill logits
// are bit-identical to the per-token path, and through it to llama.cpp.
//
// Why it is faster. The per-token path unpacks a weight block, converts two fp16 scales and
// reduces 8 lanes once per (row, column). Here a weight block is unpacked once and applied to 8
// columns; the columns' int8 values, their scales as floats and their block sums are laid out
// once per 8-column panel; and two columns share one 512-bit register (column 2p in lanes 0-7,
// column 2p+1 in lanes 8-15), so one vpdpbusd / cvt / mul / FMA does two columns' work. The
// lanes of a 512-bit op are independent, so this changes no result.
//
// Integer sums, which are exact whatever the method:
//   unsigned weights (q4_1, q5_1): vpdpbusd(q_w as u8, q_a as s8), as the vec_dot.
//   signed weights (q4_0, q5_0, q8_0): the panel holds q_a + 128 as u8, and
//     sum4(q_w * q_a) = vpdpbusd(-128 * sum4(q_w), q_a + 128, q_w),
//   the correction computed once per weight block. ggml's sign trick (|w| * sign(a, w)) gives
//   the same integers except where w = a = -128, which the q8 activation quantizers never
//   produce (their values are in [-127, 127]).
//
// Layout: weights as stored (rows of blocks); activations as rows of the vec_dot_type
// (block_q8_0 / block_q8_1), packed here per panel of 8 columns into a thread-local buffer.
// Loop order: panel, then row tiles of 4: a panel (<= 26 KB at k = 1536) stays in L1 while the
// caller's slice of weight rows streams from L2.
#include <immintrin.h>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -Wall at -O3
// then reports as maybe-uninitialized inside the headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/fp16.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

constexpr int kCols = 8;   // columns per panel (4 pairs)
constexpr int kRows = 4;   // weight rows per register tile

// One 32-element block of an 8-column panel.
struct PanelBlock {
    uint8_t qs[kCols][32];  // column c's 32 values (s8, or s8 + 128 for signed weights)
    float d[kCols];         // column c's scale
    float s[kCols];         // column c's fp16 block sum as float (q8_1 only)
};

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// As quants_256.h's hsum_float_8.
inline float hsum_float_8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

inline __m256i bytes_from_nibbles_32(const uint8_t* p) {
    const __m128i tmp = _mm_loadu_si128((const __m128i*)p);
    const __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
    return _mm256_and_si256(bytes, _mm256_set1_epi8(0x0F));
}

inline __m256i bytes_from_bits_32(const uint8_t* p) {
    uint32_t x32;
    std::memcpy(&x32, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// ---- weight types: how to get a block's 32 values (in both 256-bit halves) and scales ---------

struct Q4_1 {
    using block = block_q4_1;
    static constexpr bool kSigned = false, kMin = true;
    static __m256i q(const block& b) { return bytes_from_nibbles_32(b.qs); }
    static float m(const block& b) { return h2f(b.m); }
};
struct Q5_1 {
    using block = block_q5_1;
    static constexpr bool kSigned = false, kMin = true;
    static __m256i q(const block& b) {
        const __m256i hi = _mm256_and_si256(bytes_from_bits_32(b.qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(bytes_from_nibbles_32(b.qs), hi);
    }
    static float m(const block& b) { return h2f(b.m); }
};
struct Q4_0 {
    using block = block_q4_0;
    static constexpr bool kSigned = true, kMin = false;
    static __m256i q(const block& b) { return _mm256_sub_epi8(bytes_from_nibbles_32(b.qs), _mm256_set1_epi8(8)); }
    static float m(const block&) { return 0.0f; }
};
struct Q5_0 {
    using block = block_q5_0;
    static constexpr bool kSigned = true, kMin = false;
    static __m256i q(const block& b) {
        const __m256i hi = _mm256_andnot_si256(bytes_from_bits_32(b.qh), _mm256_set1_epi8((char)0xF0));
        return _mm256_or_si256(bytes_from_nibbles_32(b.qs), hi);
    }
    static float m(const block&) { return 0.0f; }
};
struct Q8_0 {
    using block = block_q8_0;
    static constexpr bool kSigned = true, kMin = false;
    static __m256i q(const block& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
    static float m(const block&) { return 0.0f; }
};

// ---- packing -------------------------------------------------------------------------------

// Columns [c0, c0 + nc) of the activations (rows of block_q8_0 or block_q8_1) into one panel;
// missing columns (nc < 8) are zero.
template <bool kQ8_1, bool kOffset>
void pack_panel(const uint8_t* a, size_t a_stride, int64_t nb, int nc, PanelBlock* out) {
    std::memset(out, 0, sizeof(PanelBlock) * nb);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int c = 0; c < nc; ++c) {
        const uint8_t* row = a + c * a_stride;
        for (int64_t i = 0; i < nb; ++i) {
            const int8_t* qs;
            if (kQ8_1) {
                const block_q8_1& b = ((const block_q8_1*)row)[i];
                out[i].d[c] = h2f(b.d);
                out[i].s[c] = h2f(b.s);
                qs = b.qs;
            } else {
                const block_q8_0& b = ((const block_q8_0*)row)[i];
                out[i].d[c] = h2f(b.d);
                qs = b.qs;
            }
            __m256i v = _mm256_loadu_si256((const __m256i*)qs);
            if (kOffset) v = _mm256_xor_si256(v, bias);  // s8 + 128 as u8
            _mm256_storeu_si256((__m256i*)out[i].qs[c], v);
        }
    }
    if (kOffset)  // padding columns hold a = 0, i.e. 128 in offset form
        for (int c = nc; c < kCols; ++c)
            for (int64_t i = 0; i < nb; ++i) std::memset(out[i].qs[c], 0x80, 32);
}

// ---- the register tile: R weight rows x 8 columns -------------------------------------------

template <class W, int R>
void tile(const uint8_t* w, size_t w_stride, int64_t nb, const PanelBlock* pan, int nc, float* y, int64_t ldy) {
    using block = typename W::block;
    __m512 acc[R][kCols / 2];
    __m256 summs[R];
    for (int r = 0; r < R; ++r) {
        summs[r] = _mm256_setzero_ps();
        for (int p = 0; p < kCols / 2; ++p) acc[r][p] = _mm512_setzero_ps();
    }
    // Lane j of pair p takes column 2p + j / 8.
    const __m512i dsel[4] = {
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
        _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
        _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6)};
    for (int64_t i = 0; i < nb; ++i) {
        const PanelBlock& pb = pan[i];
        const __m512 d8 = _mm512_castps256_ps512(_mm256_loadu_ps(pb.d));
        __m512 dy[kCols / 2];
        for (int p = 0; p < kCols / 2; ++p) dy[p] = _mm512_permutexvar_ps(dsel[p], d8);
        for (int r = 0; r < R; ++r) {
            const block& b = ((const block*)(w + r * w_stride))[i];
            const __m512i qx = _mm512_broadcast_i64x4(W::q(b));
            const __m512 dx = _mm512_set1_ps(h2f(b.d));
            __m512i base = _mm512_setzero_si512();
            if (W::kSigned)  // -128 * sum4(q_w)
                base = _mm512_sub_epi32(base, _mm512_dpbusd_epi32(base, _mm512_set1_epi8((char)0x80), qx));
            if (W::kMin) summs[r] = _mm256_fmadd_ps(_mm256_set1_ps(W::m(b)), _mm256_loadu_ps(pb.s), summs[r]);
            for (int p = 0; p < kCols / 2; ++p) {
                const __m512i qy = _mm512_loadu_si512((const void*)pb.qs[2 * p]);
                const __m512i isum = W::kSigned ? _mm512_dpbusd_epi32(base, qy, qx) : _mm512_dpbusd_epi32(base, qx, qy);
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[p]), _mm512_cvtepi32_ps(isum), acc[r][p]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        alignas(32) float sm[8];
        _mm256_store_ps(sm, summs[r]);
        for (int p = 0; p < kCols / 2; ++p) {
            const int c0 = 2 * p;
            if (c0 < nc) {
                const float v = hsum_float_8(_mm512_castps512_ps256(acc[r][p]));
                y[c0 * ldy + r] = W::kMin ? v + sm[c0] : v;
            }
            if (c0 + 1 < nc) {
                const float v = hsum_float_8(_mm512_extractf32x8_ps(acc[r][p], 1));
                y[(c0 + 1) * ldy + r] = W::kMin ? v + sm[c0 + 1] : v;
            }
        }
    }
}

template <class W>
void gemm(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, float* y,
          int64_t ldy) {
    const int64_t nb = k / 32;
    thread_local std::vector<PanelBlock> panel;
    if ((int64_t)panel.size() < nb) panel.resize(nb);
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* ab = static_cast<const uint8_t*>(a);
    for (int64_t c0 = 0; c0 < n; c0 += kCols) {
        const int nc = (int)std::min<int64_t>(kCols, n - c0);
        pack_panel<W::kMin, W::kSigned>(ab + c0 * a_stride, a_stride, nb, nc, panel.data());
        float* yc = y + c0 * ldy;
        int64_t r = 0;
        for (; r + kRows <= m; r += kRows) tile<W, kRows>(wb + r * w_stride, w_stride, nb, panel.data(), nc, yc + r, ldy);
        switch (m - r) {
            case 3: tile<W, 3>(wb + r * w_stride, w_stride, nb, panel.data(), nc, yc + r, ldy); break;
            case 2: tile<W, 2>(wb + r * w_stride, w_stride, nb, panel.data(), nc, yc + r, ldy); break;
            case 1: tile<W, 1>(wb + r * w_stride, w_stride, nb, panel.data(), nc, yc + r, ldy); break;
            default: break;
        }
    }
}

}  // namespace

void fill_gemm_avx512(KernelTable& t) {
    t.types[TYPE_Q4_0].gemm = gemm<Q4_0>;
    t.types[TYPE_Q4_1].gemm = gemm<Q4_1>;
    t.types[TYPE_Q5_0].gemm = gemm<Q5_0>;
    t.types[TYPE_Q5_1].gemm = gemm<Q5_1>;
    t.types[TYPE_Q8_0].gemm = gemm<Q8_0>;
}

}  // namespace ei
