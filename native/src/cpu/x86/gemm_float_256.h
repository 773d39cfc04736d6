// Tiled GEMM for F32 and F16 weights (prompt chunks and encoder batches of embedding models, whose
// weights are mostly F16), every output bit-identical to this unit's vec_dot_f32_256 /
// vec_dot_f16_256 (cpu/x86/quants_256.h), so matmul may use it for any batch and a row's result
// never depends on the rows beside it.
//
// What is computed: that vec_dot keeps four independent 8-lane FMA chains over a row (chain j
// takes elements 32i + 8j .. 32i + 8j + 7), sums them with reduce4 and adds the k % 32 tail in
// double. Each chain is its own sequence of FMAs, so running the four chains one after another
// gives the same floats as running them interleaved: a register tile of kRows weight rows x kCols
// activation columns keeps one chain's accumulators in registers for all its outputs, then the
// next chain's, and reduces the four at the end as vec_dot does.
//
// Why it is faster than one vec_dot per output: vec_dot_f16 converts both operands from F16 for
// every output (two conversions per FMA) and reduces across lanes after a 384-element row; here a
// weight tile is converted to F32 once per block of columns (into a thread-local buffer, in L1),
// the block's activations once for all the row tiles (in L2), and each loaded activation vector
// feeds kRows FMAs.
//
// Like quants_256.h this file is compiled by the AVX2 and the AVX-512 unit, each with its flags;
// the AVX-512 unit takes a wider tile.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/x86/quants_256.h"

namespace ei {
namespace {

namespace gemm_float {

// The register tile: kRows weight rows x kCols activation columns, one accumulator each. AVX2
// holds 8 accumulators, 2 activations and a weight in its 16 registers; the AVX-512 unit has 32
// (AVX-512VL reaches them with 256-bit operations) and holds 16, 4 and 1.
constexpr int kRows = 4;
#ifdef __AVX512F__
constexpr int kCols = 4;
#else
constexpr int kCols = 2;
#endif
// Elements of k a tile runs before the next column tile takes over (a multiple of 32): the row
// tile's span (4 x 384 floats, 6 KiB) stays in L1 while the columns' spans stream past it. The
// four chains' accumulators are kept per column tile between spans (stored and reloaded: the
// FMAs and their order are unchanged). Without spans a 4 x 4 tile's whole rows and columns of
// 1536 elements (the FFN's down projection: 48 KiB) do not fit L1 (docs/PERFORMANCE.md).
constexpr int64_t kSpan = 384;
// Activation columns per block: the block's current span (as F32: 192 KiB) stays in L2 while every
// row tile of the thread's slice passes over it; the row tile is converted once per block.
constexpr int64_t kColBlock = 128;
// Floats of one tile's four chains of accumulators.
constexpr int64_t kStateFloats = 4 * kRows * kCols * 8;

// Elements [i0, i1) of the 32-aligned part of the R x C outputs of rows w[0..R) and columns
// a[0..C), both as F32 (F16 operands are converted before: exactly, so the products are
// vec_dot_f16's), onto the four chains in `state` (from zero when `first`). The chains run one
// after another, a pass each. (Two chains in each 512-bit register, all four in one pass, was
// slower on Zen 4: docs/PERFORMANCE.md.)
template <int R, int C>
void span(const float* const* w, const float* const* a, int64_t i0, int64_t i1, float* state, bool first) {
    for (int j = 0; j < 4; ++j) {
        float* chain = state + j * R * C * 8;
        __m256 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c)
                acc[r][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(chain + (r * C + c) * 8);
        for (int64_t i = i0 + 8 * j; i < i1; i += 32) {
            __m256 av[C];
            for (int c = 0; c < C; ++c) av[c] = _mm256_loadu_ps(a[c] + i);
            for (int r = 0; r < R; ++r) {
                const __m256 wv = _mm256_loadu_ps(w[r] + i);
                for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, av[c], acc[r][c]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) _mm256_storeu_ps(chain + (r * C + c) * 8, acc[r][c]);
    }
}

// hsum_float_8 (quants_256.h) of eight vectors at once, out[i] = hsum_float_8(x[i]): the same
// three adds with the same operands (lanes paired across registers instead of within one).
inline void hsum_float_8x8(const __m256* x, float* out) {
    __m256 s[4];  // s[i]: [hi + lo of x[2i] | hi + lo of x[2i + 1]]
    for (int i = 0; i < 4; ++i)
        s[i] = _mm256_add_ps(_mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x31),
                             _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x20));
    // r + movehl(r): lanes (0 + 2, 1 + 3) of each.
    const __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], 0x44), _mm256_shuffle_ps(s[0], s[1], 0xEE));
    const __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], 0x44), _mm256_shuffle_ps(s[2], s[3], 0xEE));
    // r + movehdup(r): lane 0 + lane 1. Lanes: x[0], x[2], x[4], x[6] | x[1], x[3], x[5], x[7].
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(_mm256_shuffle_ps(u0, u1, 0x88), _mm256_shuffle_ps(u0, u1, 0xDD)));
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = v[i];
        out[2 * i + 1] = v[4 + i];
    }
}

// y[c * ldy + r] from the chains as vec_dot ends: reduce4, then the k % 32 tail in double (a
// float through double and back is itself, so without a tail the sum is stored as it is).
template <int R, int C>
void finish(int64_t k, const float* const* w, const float* const* a, const float* state, float* y, int64_t ldy) {
    const int64_t np = k & ~(int64_t)31;
    constexpr int kOut = R * C;
    auto chain = [&](int j, int o) { return _mm256_loadu_ps(state + j * kOut * 8 + o * 8); };
    __m256 x[kOut];  // reduce4's operand of hsum_float_8, output o = r * C + c
    for (int o = 0; o < kOut; ++o)
        x[o] = _mm256_add_ps(_mm256_add_ps(chain(0, o), chain(2, o)), _mm256_add_ps(chain(1, o), chain(3, o)));
    float sums[kOut];
    int o = 0;
    for (; o + 8 <= kOut; o += 8) hsum_float_8x8(x + o, sums + o);
    for (; o < kOut; ++o) sums[o] = hsum_float_8(x[o]);
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            if (np == k) {
                y[c * ldy + r] = sums[r * C + c];
                continue;
            }
            double sum = sums[r * C + c];
            for (int64_t i = np; i < k; i++) sum += (double)(w[r][i] * a[c][i]);
            y[c * ldy + r] = (float)sum;
        }
}

using SpanFn = void (*)(const float* const*, const float* const*, int64_t, int64_t, float*, bool);
using FinishFn = void (*)(int64_t, const float* const*, const float* const*, const float*, float*, int64_t);
struct TileFns {
    SpanFn span;
    FinishFn finish;
};

// The functions of every tile size, for the partial tiles at the ends: kTiles[R - 1][C - 1].
template <int R, int... Cs>
constexpr std::array<TileFns, kCols> tiles_of_height(std::integer_sequence<int, Cs...>) {
    return {TileFns{span<R, Cs + 1>, finish<R, Cs + 1>}...};
}
template <int... Rs>
constexpr std::array<std::array<TileFns, kCols>, kRows> all_tiles(std::integer_sequence<int, Rs...>) {
    return {tiles_of_height<Rs + 1>(std::make_integer_sequence<int, kCols>())...};
}

// W is F32 (T = float) or F16 (T = uint16_t); activations are W's vec_dot_type, the same type.
template <typename T>
void gemm(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, float* y,
          int64_t ldy) {
    static constexpr auto kTiles = all_tiles(std::make_integer_sequence<int, kRows>());
    constexpr bool kHalf = !std::is_same_v<T, float>;
    constexpr int64_t kColTiles = (kColBlock + kCols - 1) / kCols;
    thread_local std::vector<float> w_tile;   // [kRows][k]: an F16 row tile as F32
    thread_local std::vector<float> a_block;  // [kColBlock][k]: an F16 column block as F32
    thread_local std::vector<float> states(kColTiles * kStateFloats);  // [column tile][kStateFloats]
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* ab = static_cast<const uint8_t*>(a);
    const int64_t np = k & ~(int64_t)31;
    if constexpr (kHalf) {
        w_tile.resize((size_t)(kRows * k));
        a_block.resize((size_t)(kColBlock * k));
    }
    for (int64_t c0 = 0; c0 < n; c0 += kColBlock) {
        const int64_t c1 = std::min(n, c0 + kColBlock);
        const float* acts[kColBlock];
        for (int64_t c = c0; c < c1; ++c) {
            const uint8_t* col = ab + (size_t)c * a_stride;
            if constexpr (kHalf) {
                to_float_f16_256(col, a_block.data() + (c - c0) * k, k);
                acts[c - c0] = a_block.data() + (c - c0) * k;
            } else {
                acts[c - c0] = reinterpret_cast<const float*>(col);
            }
        }
        for (int64_t r0 = 0; r0 < m; r0 += kRows) {
            const int rows = (int)std::min<int64_t>(kRows, m - r0);
            const float* wr[kRows];
            for (int r = 0; r < rows; ++r) {
                const uint8_t* row = wb + (size_t)(r0 + r) * w_stride;
                if constexpr (kHalf) {
                    to_float_f16_256(row, w_tile.data() + r * k, k);
                    wr[r] = w_tile.data() + r * k;
                } else {
                    wr[r] = reinterpret_cast<const float*>(row);
                }
            }
            // The next tile's weights are requested now, to arrive while this tile computes: with
            // few columns (one embedding input) the hardware prefetcher alone leaves each
            // tile's conversion waiting on memory.
            if (r0 + kRows < m) {
                const uint8_t* next = wb + (size_t)(r0 + kRows) * w_stride;
                const size_t bytes = (size_t)std::min<int64_t>(kRows, m - r0 - kRows) * w_stride;
                for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(next + off, 0, 3);
            }
            // Spans of k outer, column tiles inner; at least one span, so that k < 32 still
            // starts every chain from zero.
            for (int64_t i0 = 0; i0 == 0 || i0 < np; i0 += kSpan) {
                const int64_t i1 = std::min(np, i0 + kSpan);
                for (int64_t c = c0; c < c1; c += kCols) {
                    const int cols = (int)std::min<int64_t>(kCols, c1 - c);
                    float* state = states.data() + (c - c0) / kCols * kStateFloats;
                    kTiles[rows - 1][cols - 1].span(wr, acts + (c - c0), i0, i1, state, i0 == 0);
                }
            }
            for (int64_t c = c0; c < c1; c += kCols) {
                const int cols = (int)std::min<int64_t>(kCols, c1 - c);
                const float* state = states.data() + (c - c0) / kCols * kStateFloats;
                kTiles[rows - 1][cols - 1].finish(k, wr, acts + (c - c0), state, y + c * ldy + r0, ldy);
            }
        }
    }
}

}  // namespace gemm_float

void fill_gemm_float_256(KernelTable& t) {
    t.types[TYPE_F32].gemm = gemm_float::gemm<float>;
    t.types[TYPE_F16].gemm = gemm_float::gemm<uint16_t>;
}

}  // namespace
}  // namespace ei
