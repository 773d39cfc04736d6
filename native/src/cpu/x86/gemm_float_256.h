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
// weight tile is converted to F32 once per block of columns (into a thread-local buffer, in L1)
// and each loaded activation vector feeds kRows FMAs.
//
// Like quants_256.h this file is compiled by the AVX2 and the AVX-512 unit, each with its flags.
// The AVX2 unit runs the four chains one after another; the AVX-512 unit keeps two chains in each
// 512-bit register and runs all four in one pass.
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

constexpr int kRows = 4;  // weight rows per register tile
// Activation columns per register tile: AVX2 holds 8 accumulators, 2 activations and a weight in
// its 16 registers; AVX-512 16 accumulators (two per output), 4 activations and 2 weights of 32.
constexpr int kCols = 2;
// Activation columns per block: a block's activations stay in L2 while every row tile of the
// thread's slice passes over them.
constexpr int64_t kColBlock = 128;

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return load_f16x8(p); }
inline float value(float v) { return v; }
inline float value(uint16_t v) { return fp16_to_fp32(v); }

// y[c * ldy + r] for the R x C outputs of rows w[0..R) (as F32) and columns a[0..C).
#ifdef __AVX512F__
// One pass with all four chains: a 512-bit register holds chains 0 and 1 of an output (elements
// 32i .. 32i + 15 are chain 0's 8 then chain 1's 8), a second one chains 2 and 3; a lane-wise FMA
// is the same FMA either way.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p)); }

template <int R, int C, typename A>
void tile(int64_t k, const float* const* w, const A* const* a, float* y, int64_t ldy) {
    const int64_t np = k & ~(int64_t)31;
    __m512 c01[R][C], c23[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) c01[r][c] = c23[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < np; i += 32) {
        __m512 a01[C], a23[C];
        for (int c = 0; c < C; ++c) {
            a01[c] = load16(a[c] + i);
            a23[c] = load16(a[c] + i + 16);
        }
        for (int r = 0; r < R; ++r) {
            const __m512 w01 = _mm512_loadu_ps(w[r] + i), w23 = _mm512_loadu_ps(w[r] + i + 16);
            for (int c = 0; c < C; ++c) {
                c01[r][c] = _mm512_fmadd_ps(w01, a01[c], c01[r][c]);
                c23[r][c] = _mm512_fmadd_ps(w23, a23[c], c23[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            // reduce4(c0, c1, c2, c3) = hsum_float_8((c0 + c2) + (c1 + c3)): the sum of the two
            // registers is [c0 + c2 | c1 + c3], and its halves added are the operand of hsum.
            const __m512 pairs = _mm512_add_ps(c01[r][c], c23[r][c]);
            double sum = hsum_float_8(_mm256_add_ps(_mm512_castps512_ps256(pairs), _mm512_extractf32x8_ps(pairs, 1)));
            for (int64_t i = np; i < k; i++) sum += (double)(w[r][i] * value(a[c][i]));
            y[c * ldy + r] = (float)sum;
        }
}
#else
// The four chains one after another (a pass each), for AVX2's 16 registers.
template <int R, int C, typename A>
void tile(int64_t k, const float* const* w, const A* const* a, float* y, int64_t ldy) {
    const int64_t np = k & ~(int64_t)31;
    __m256 chain[4][R][C];
    for (int j = 0; j < 4; ++j) {
        __m256 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
        for (int64_t i = 8 * j; i < np; i += 32) {
            __m256 av[C];
            for (int c = 0; c < C; ++c) av[c] = load8(a[c] + i);
            for (int r = 0; r < R; ++r) {
                const __m256 wv = _mm256_loadu_ps(w[r] + i);
                for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, av[c], acc[r][c]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) chain[j][r][c] = acc[r][c];
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            double sum = reduce4(chain[0][r][c], chain[1][r][c], chain[2][r][c], chain[3][r][c]);
            for (int64_t i = np; i < k; i++) sum += (double)(w[r][i] * value(a[c][i]));
            y[c * ldy + r] = (float)sum;
        }
}
#endif

template <typename A>
using TileFn = void (*)(int64_t, const float* const*, const A* const*, float*, int64_t);

// tile<R, C> for the partial tiles at the ends of a slice: kTiles[R - 1][C - 1].
template <typename A, int R, int... Cs>
constexpr std::array<TileFn<A>, kCols> tiles_of_height(std::integer_sequence<int, Cs...>) {
    return {tile<R, Cs + 1, A>...};
}
template <typename A, int... Rs>
constexpr std::array<std::array<TileFn<A>, kCols>, kRows> all_tiles(std::integer_sequence<int, Rs...>) {
    return {tiles_of_height<A, Rs + 1>(std::make_integer_sequence<int, kCols>())...};
}

// W is F32 (T = float) or F16 (T = uint16_t); activations are W's vec_dot_type, the same type.
template <typename T>
void gemm(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, float* y,
          int64_t ldy) {
    static constexpr auto kTiles = all_tiles<T>(std::make_integer_sequence<int, kRows>());
    thread_local std::vector<float> converted;  // [kRows][k]: an F16 row tile as F32
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* ab = static_cast<const uint8_t*>(a);
    if constexpr (!std::is_same_v<T, float>) converted.resize((size_t)(kRows * k));
    for (int64_t c0 = 0; c0 < n; c0 += kColBlock) {
        const int64_t c1 = std::min(n, c0 + kColBlock);
        for (int64_t r0 = 0; r0 < m; r0 += kRows) {
            const int rows = (int)std::min<int64_t>(kRows, m - r0);
            const float* wr[kRows];
            for (int r = 0; r < rows; ++r) {
                const uint8_t* row = wb + (size_t)(r0 + r) * w_stride;
                if constexpr (std::is_same_v<T, float>) {
                    wr[r] = reinterpret_cast<const float*>(row);
                } else {
                    to_float_f16_256(row, converted.data() + r * k, k);
                    wr[r] = converted.data() + r * k;
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
            for (int64_t c = c0; c < c1; c += kCols) {
                const int cols = (int)std::min<int64_t>(kCols, c1 - c);
                const T* ar[kCols];
                for (int j = 0; j < cols; ++j) ar[j] = reinterpret_cast<const T*>(ab + (size_t)(c + j) * a_stride);
                kTiles[rows - 1][cols - 1](k, wr, ar, y + c * ldy + r0, ldy);
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
