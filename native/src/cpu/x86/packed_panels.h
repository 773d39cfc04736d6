// How the packed GEMV/GEMMs over 256-element super-blocks (Q4_K, Q5_K, Q6_K, IQ4_XS; cpu/repack.h) walk a
// call: group after group, each under every panel of up to MaxCols activation columns (a panel's
// width a compile-time constant of the tile, so its accumulators stay in registers), the first
// panel requesting the next group ahead while it streams this one. Shared by the AVX2 and AVX-512
// units, each compiling it with its own flags (anonymous namespace: each gets its own copy).
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/repack.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// Q4_K's and Q5_K's minimums (cpu/repack.h) take a column's sums of q_a over 32-value sub-blocks in int16
// pairs, as VPMADDWD / VPDPWSSD multiply them against a row's two minimums: pair u = (bs[2u],
// bs[2u + 1]), bs[s] = bsums[2s] + bsums[2s + 1] (|bs| <= 32 * 128 fits int16).
inline void q4_K_bsum_pairs(const block_q8_K& a, int32_t out[4]) {
    for (int u = 0; u < 4; ++u) {
        const int lo = a.bsums[4 * u] + a.bsums[4 * u + 1], hi = a.bsums[4 * u + 2] + a.bsums[4 * u + 3];
        out[u] = (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
    }
}

// fn(std::integral_constant<int, nc>{}) for 1 <= nc <= Max.
template <int Max, class Fn>
inline void with_panel_width(int nc, Fn&& fn) {
    if constexpr (Max > 1) {
        if (nc == Max) return fn(std::integral_constant<int, Max>{});
        return with_panel_width<Max - 1>(nc, fn);
    } else {
        return fn(std::integral_constant<int, 1>{});
    }
}

// A packed GEMV/GEMM of `Type` (gemm_16row_groups's signature after k): tile(width, nb, group,
// layout, the panel's activation rows, y of its first output, ldy, prefetch) over every group and
// panel (w: m / 16 groups of w_stride bytes; a: n rows of q8_K blocks, a_stride apart;
// y[c * ldy + r]). prefetch is the byte distance to the next group's lines for the first panel,
// else 0. tile is typically [](auto nc, auto&&... args) { tile<decltype(nc)::value>(args...); }.
template <int MaxCols, uint32_t Type, class Tile>
inline void run_packed_superblocks(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                                   size_t a_stride, float* y, int64_t ldy, Tile&& tile) {
    using Act = block_q8_K;
    const int64_t nb = k / QK_K;
    const PackedLayout lay = packed_layout(Type, k);
    const uint8_t* a8 = static_cast<const uint8_t*>(a);
    const Act* cols[MaxCols];
    const int64_t groups = m / kPackRows;
    for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* grp = static_cast<const uint8_t*>(w) + g * w_stride;
        const size_t pf = w_stride;  // the next group, requested ahead (past the last one too: cpu/repack.h)
        for_each_panel(n, MaxCols, [&](int64_t p, int64_t c0, int nc) {
            for (int c = 0; c < nc; ++c) cols[c] = reinterpret_cast<const Act*>(a8 + (c0 + c) * a_stride);
            float* yp = y + c0 * ldy + g * kPackRows;
            with_panel_width<MaxCols>(nc, [&](auto width) { tile(width, nb, grp, lay, cols, yp, ldy, p == 0 ? pf : 0); });
        });
    }
}

}  // namespace
}  // namespace ei
