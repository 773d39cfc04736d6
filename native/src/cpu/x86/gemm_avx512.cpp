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
// reduces 8 lanes once per (row, column). Here a weight block is unpacked once (values, scale,
// signed types' correction) and applied to every column; the columns' int8 values, their scales
// as floats and their block sums are laid out once per 8-column panel; and two columns share
// one 512-bit register (column 2p in lanes 0-7, column 2p+1 in lanes 8-15), so one vpdpbusd /
// cvt / mul / FMA does two columns' work. The lanes of a 512-bit op are independent, so this
// changes no result.
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
// (block_q8_0 / block_q8_1), all packed first, per panel of 8 columns, into a thread-local buffer
// (320 bytes a block and panel: ~400 KB for 512 columns at k = 640). Loop order: row tiles of 4,
// unpacked into a small thread-local buffer (72 bytes a block and row, in L1), then every panel
// (streamed from L2). Unpacking a tile's rows once per panel instead (the earlier order, panels
// outermost) was slower on Gemma 3's Q5_0 matrices (docs/PERFORMANCE.md).
#include <immintrin.h>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -Wall at -O3
// then reports as maybe-uninitialized inside the headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "common/error.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "cpu/x86/gemm_avx512.h"
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
    static_assert(offsetof(block_q4_1, m) == offsetof(block_q4_1, d) + 2, "d and m are adjacent halves");
    static __m256i q(const block& b) { return bytes_from_nibbles_32(b.qs); }
    static float m(const block& b) { return h2f(b.m); }
};
struct Q5_1 {
    using block = block_q5_1;
    static constexpr bool kSigned = false, kMin = true;
    static_assert(offsetof(block_q5_1, m) == offsetof(block_q5_1, d) + 2, "d and m are adjacent halves");
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

// ---- unpacked weight rows --------------------------------------------------------------------

// One 32-element weight block, unpacked once per row tile and then applied to every panel.
struct RowBlock {
    uint8_t q[32];    // the 32 values (u8 for unsigned types, s8 for signed)
    int32_t base[8];  // signed types: -128 * sum4(q) per int32 lane (the offset-form correction)
    float d;          // d_w
    float m;          // m_w (q4_1 / q5_1)
};

template <class W>
void unpack_row(const uint8_t* w, int64_t nb, RowBlock* out) {
    using block = typename W::block;
    const block* x = (const block*)w;
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i q = W::q(x[i]);
        _mm256_storeu_si256((__m256i*)out[i].q, q);
        __m256i base = _mm256_setzero_si256();
        if (W::kSigned) base = _mm256_sub_epi32(base, _mm256_dpbusd_epi32(base, _mm256_set1_epi8((char)0x80), q));
        _mm256_storeu_si256((__m256i*)out[i].base, base);
        out[i].d = h2f(x[i].d);
        out[i].m = W::m(x[i]);
    }
}

// Row j of a group repacked into 16-row groups (cpu/repack.h): each block put back together as
// stored (its scales and its 4-byte pieces of qs), then unpacked as above.
template <class W>
void unpack_packed_row(const uint8_t* grp, const PackedLayout& lay, int64_t j, int64_t nb, RowBlock* out) {
    using block = typename W::block;
    constexpr int kPieces = sizeof(block::qs) / 4;
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const uint8_t* qs = grp + lay.qs;
    for (int64_t i = 0; i < nb; ++i) {
        block b;
        b.d = d[i * kPackRows + j];
        if constexpr (W::kMin) b.m = reinterpret_cast<const uint16_t*>(grp + lay.m)[i * kPackRows + j];
        for (int t = 0; t < kPieces; ++t) std::memcpy(b.qs + 4 * t, qs + ((i * kPieces + t) * kPackRows + j) * 4, 4);
        unpack_row<W>(reinterpret_cast<const uint8_t*>(&b), 1, out + i);
    }
}

// The scales of column pair p of a panel block (d8: its 8 column scales) in a pair's lanes:
// lane j takes column 2p + j / 8's.
inline __m512 pair_scales(__m512 d8, int p) {
    const __m512i select = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
    return _mm512_permutexvar_ps(select, d8);
}

// The outputs of an R x (2 NP) register tile: column 2p of row r in the low half of acc[r][p],
// column 2p + 1 in the high half, each reduced as hsum_float_8 does, the minimum term added last.
template <class W, int R, int NP>
void store_tile(const __m512 (&acc)[R][NP], const __m256 (&summs)[R], int nc, float* y, int64_t ldy) {
    for (int r = 0; r < R; ++r) {
        alignas(32) float sm[8];
        _mm256_store_ps(sm, summs[r]);
        for (int p = 0; p < NP; ++p) {
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

// ---- the register tile: R weight rows x 8 columns -------------------------------------------

template <class W, int R>
void tile(const RowBlock* const* rows, int64_t nb, const PanelBlock* pan, int nc, float* y, int64_t ldy) {
    __m512 acc[R][kCols / 2];
    __m256 summs[R];
    for (int r = 0; r < R; ++r) {
        summs[r] = _mm256_setzero_ps();
        for (int p = 0; p < kCols / 2; ++p) acc[r][p] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
        const PanelBlock& pb = pan[i];
        const __m512 d8 = _mm512_castps256_ps512(_mm256_loadu_ps(pb.d));
        __m512 dy[kCols / 2];
        for (int p = 0; p < kCols / 2; ++p) dy[p] = pair_scales(d8, p);
        for (int r = 0; r < R; ++r) {
            const RowBlock& b = rows[r][i];
            const __m512i qx = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)b.q));
            const __m512 dx = _mm512_set1_ps(b.d);
            const __m512i base = W::kSigned ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)b.base))
                                            : _mm512_setzero_si512();
            if (W::kMin) summs[r] = _mm256_fmadd_ps(_mm256_set1_ps(b.m), _mm256_loadu_ps(pb.s), summs[r]);
            for (int p = 0; p < kCols / 2; ++p) {
                const __m512i qy = _mm512_loadu_si512((const void*)pb.qs[2 * p]);
                const __m512i isum = W::kSigned ? _mm512_dpbusd_epi32(base, qy, qx) : _mm512_dpbusd_epi32(base, qx, qy);
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[p]), _mm512_cvtepi32_ps(isum), acc[r][p]);
            }
        }
    }
    store_tile<W, R, kCols / 2>(acc, summs, nc, y, ldy);
}

// All panels packed first; then per tile of 4 weight rows, the rows unpacked once (by
// unpack(r, out): row r's nb RowBlocks) and applied to every panel (a row's unpacking is
// amortized over all n columns, not 8).
template <class W, class UnpackRow>
void gemm_tiles(int64_t k, int64_t m, int64_t n, const UnpackRow& unpack, const void* a, size_t a_stride, float* y,
                int64_t ldy) {
    const int64_t nb = k / 32;
    const int64_t n_panels = (n + kCols - 1) / kCols;
    thread_local std::vector<PanelBlock> panels;  // [n_panels][nb]
    thread_local std::vector<RowBlock> unpacked;  // [kRows][nb]
    if ((int64_t)panels.size() < n_panels * nb) panels.resize(n_panels * nb);
    if ((int64_t)unpacked.size() < kRows * nb) unpacked.resize(kRows * nb);
    const uint8_t* ab = static_cast<const uint8_t*>(a);
    for (int64_t pi = 0; pi < n_panels; ++pi) {
        const int nc = (int)std::min<int64_t>(kCols, n - pi * kCols);
        pack_panel<W::kMin, W::kSigned>(ab + pi * kCols * a_stride, a_stride, nb, nc, panels.data() + pi * nb);
    }
    const RowBlock* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = unpacked.data() + r * nb;
    for (int64_t r0 = 0; r0 < m; r0 += kRows) {
        const int mr = (int)std::min<int64_t>(kRows, m - r0);
        for (int r = 0; r < mr; ++r) unpack(r0 + r, unpacked.data() + r * nb);
        for (int64_t pi = 0; pi < n_panels; ++pi) {
            const int nc = (int)std::min<int64_t>(kCols, n - pi * kCols);
            const PanelBlock* pan = panels.data() + pi * nb;
            float* yc = y + pi * kCols * ldy + r0;
            switch (mr) {
                case 4: tile<W, 4>(rows, nb, pan, nc, yc, ldy); break;
                case 3: tile<W, 3>(rows, nb, pan, nc, yc, ldy); break;
                case 2: tile<W, 2>(rows, nb, pan, nc, yc, ldy); break;
                default: tile<W, 1>(rows, nb, pan, nc, yc, ldy); break;
            }
        }
    }
}

template <class W>
void gemm(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, float* y,
          int64_t ldy) {
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const int64_t nb = k / 32;
    gemm_tiles<W>(k, m, n, [&](int64_t r, RowBlock* out) { unpack_row<W>(wb + r * w_stride, nb, out); },
                  a, a_stride, y, ldy);
}

template <class W>
void gemm_grouped(uint32_t type, int64_t k, int64_t m, int64_t n, const void* w, size_t group_bytes, const void* a,
                  size_t a_stride, float* y, int64_t ldy) {
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const int64_t nb = k / 32;
    const PackedLayout lay = packed_layout(type, k);
    gemm_tiles<W>(k, m, n, [&](int64_t r, RowBlock* out) {
        unpack_packed_row<W>(wb + (r / kPackRows) * group_bytes, lay, r % kPackRows, nb, out);
    }, a, a_stride, y, ldy);
}

// ---- decode batches: up to 8 columns, the weights streamed once ---------------------------------
// A batch of a few tokens cannot amortize unpacking rows into a buffer or a panel's padding to 8
// columns over many columns, so here the panel holds only the column pairs there are (NP), the
// weight rows are read straight from memory, R at a time (R consecutive rows are one contiguous
// stream), each block unpacked in registers and applied to every pair. Same float operations per
// output as tile() above, hence as vec_dot.

template <class W, int R, int NP>
void small_tile(const uint8_t* w, size_t w_stride, int64_t nb, const PanelBlock* pan, int nc, float* y, int64_t ldy) {
    using block = typename W::block;
    constexpr size_t kPrefetchBytes = 4096;
    const block* x[R];
    for (int r = 0; r < R; ++r) x[r] = (const block*)(w + r * w_stride);
    __m512 acc[R][NP];
    __m256 summs[R];
    for (int r = 0; r < R; ++r) {
        summs[r] = _mm256_setzero_ps();
        for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
        // The weights are read once, from DRAM: request them a few KiB ahead of use, as matmul's
        // one-token decode does (a prefetch changes no result, and past the end is harmless).
        for (int r = 0; r < R; ++r) __builtin_prefetch((const uint8_t*)&x[r][i] + kPrefetchBytes, 0, 3);
        const PanelBlock& pb = pan[i];
        const __m512 d8 = _mm512_castps256_ps512(_mm256_loadu_ps(pb.d));
        __m512 dy[NP];
        __m512i qy[NP];
        for (int p = 0; p < NP; ++p) {
            dy[p] = pair_scales(d8, p);
            qy[p] = _mm512_loadu_si512((const void*)pb.qs[2 * p]);
        }
        const __m256 s8 = W::kMin ? _mm256_loadu_ps(pb.s) : _mm256_setzero_ps();
        for (int r = 0; r < R; ++r) {
            const block& b = x[r][i];
            const __m256i q = W::q(b);
            const __m512i qx = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
            __m512 dx;
            __m256 mx = _mm256_setzero_ps();
            if (W::kMin) {
                // d and m are adjacent halves: both converted by one instruction (exact, as h2f).
                uint32_t dm;
                std::memcpy(&dm, &b.d, 4);
                const __m128 dmf = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
                dx = _mm512_broadcastss_ps(dmf);
                mx = _mm256_permutexvar_ps(_mm256_set1_epi32(1), _mm256_castps128_ps256(dmf));
            } else {
                dx = _mm512_set1_ps(h2f(b.d));
            }
            __m512i base = _mm512_setzero_si512();
            if (W::kSigned) {
                const __m256i c = _mm256_sub_epi32(_mm256_setzero_si256(),
                                                   _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), q));
                base = _mm512_inserti64x4(_mm512_castsi256_si512(c), c, 1);
            }
            if (W::kMin) summs[r] = _mm256_fmadd_ps(mx, s8, summs[r]);
            for (int p = 0; p < NP; ++p) {
                const __m512i isum = W::kSigned ? _mm512_dpbusd_epi32(base, qy[p], qx) : _mm512_dpbusd_epi32(base, qx, qy[p]);
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[p]), _mm512_cvtepi32_ps(isum), acc[r][p]);
            }
        }
    }
    store_tile<W, R, NP>(acc, summs, nc, y, ldy);
}

template <class W, int NP>
void small_batch_pass(const uint8_t* w, size_t w_stride, int64_t m, int64_t nb, const PanelBlock* pan, int nc,
                      float* y, int64_t ldy) {
    constexpr int R = 4;
    int64_t r = 0;
    for (; r + R <= m; r += R) small_tile<W, R, NP>(w + r * w_stride, w_stride, nb, pan, nc, y + r, ldy);
    switch (m - r) {
        case 3: small_tile<W, 3, NP>(w + r * w_stride, w_stride, nb, pan, nc, y + r, ldy); break;
        case 2: small_tile<W, 2, NP>(w + r * w_stride, w_stride, nb, pan, nc, y + r, ldy); break;
        case 1: small_tile<W, 1, NP>(w + r * w_stride, w_stride, nb, pan, nc, y + r, ldy); break;
        default: break;
    }
}

template <class W>
void gemm_small_batch(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                      float* y, int64_t ldy) {
    const int64_t nb = k / 32;
    thread_local std::vector<PanelBlock> panel;
    if ((int64_t)panel.size() < nb) panel.resize(nb);
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    for (int64_t c0 = 0; c0 < n; c0 += kCols) {
        const int nc = (int)std::min<int64_t>(kCols, n - c0);
        pack_panel<W::kMin, W::kSigned>(static_cast<const uint8_t*>(a) + c0 * a_stride, a_stride, nb, nc, panel.data());
        float* yc = y + c0 * ldy;
        switch ((nc + 1) / 2) {
            case 1: small_batch_pass<W, 1>(wb, w_stride, m, nb, panel.data(), nc, yc, ldy); break;
            case 2: small_batch_pass<W, 2>(wb, w_stride, m, nb, panel.data(), nc, yc, ldy); break;
            case 3: small_batch_pass<W, 3>(wb, w_stride, m, nb, panel.data(), nc, yc, ldy); break;
            default: small_batch_pass<W, 4>(wb, w_stride, m, nb, panel.data(), nc, yc, ldy); break;
        }
    }
}
static_assert(kCols == kSmallBatchMax, "a small batch is one panel");

}  // namespace

void gemm_grouped_avx512(uint32_t type, int64_t k, int64_t m, int64_t n, const void* w, size_t group_bytes,
                         const void* a, size_t a_stride, float* y, int64_t ldy) {
    switch (type) {
        case TYPE_Q4_1: return gemm_grouped<Q4_1>(type, k, m, n, w, group_bytes, a, a_stride, y, ldy);
        case TYPE_Q8_0: return gemm_grouped<Q8_0>(type, k, m, n, w, group_bytes, a, a_stride, y, ldy);
        default: throw Error(std::string("no grouped AVX-512 GEMM for ") + type_info(type).name);
    }
}

void fill_gemm_avx512(KernelTable& t) {
    t.types[TYPE_Q4_0].gemm = gemm<Q4_0>;
    t.types[TYPE_Q4_1].gemm = gemm<Q4_1>;
    t.types[TYPE_Q5_0].gemm = gemm<Q5_0>;
    t.types[TYPE_Q5_1].gemm = gemm<Q5_1>;
    t.types[TYPE_Q8_0].gemm = gemm<Q8_0>;
    t.types[TYPE_Q4_0].gemm_small_batch = gemm_small_batch<Q4_0>;
    t.types[TYPE_Q4_1].gemm_small_batch = gemm_small_batch<Q4_1>;
    t.types[TYPE_Q5_0].gemm_small_batch = gemm_small_batch<Q5_0>;
    t.types[TYPE_Q5_1].gemm_small_batch = gemm_small_batch<Q5_1>;
    t.types[TYPE_Q8_0].gemm_small_batch = gemm_small_batch<Q8_0>;
}

}  // namespace ei
