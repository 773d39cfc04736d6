// The x86 GEMMs for the k-quant weights (Q4_K, Q5_K, Q6_K) times Q8_K activations (prefill),
// written once over a unit's vector traits V: gemm_kquants_avx512.cpp (16 rows a tile, VPDPBUSD)
// and gemm_kquants_avx2.cpp (8 rows, VPMADDUBSW + VPMADDWD) each compile it with their flags.
//
// What is computed. y[c][r] = the per-output dot product that matmul would otherwise call for
// weight row r and activation column c, in that function's float order (cpu/x86/kquants_256.h):
//   gemm_ggml_repack (q4_K): vec_dot_q4_K_q8_K_repacked_gemm_256's order, the one ggml's repacked
//     q4_K GEMM uses. Per super-block i and pair j of 32-element sub-blocks:
//       isum = sc_2j dot_2j + sc_2j+1 dot_2j+1,  imin = m_2j bsum_2j + m_2j+1 bsum_2j+1
//       acc  = fma(float(isum), d_x * d_y, acc),  acc_m = fma(float(imin), dmin_x * d_y, acc_m)
//     and y = acc - acc_m.
//   gemm_ggml_tiled (q4_K, q5_K, q6_K): vec_dot_tiled_256's order, ggml's tiled k-quant GEMM. Per
//     super-block, with sumi and summ the whole block's exact integers:
//       r = fma(-dmin_x, float(summ), float(sumi) * d_x)   (q6_K: r = float(sumi) * d_x)
//       acc = fma(r, d_y, acc)
// Only the integers are computed differently, and integer sums are exact in any order; every
// float operation of an output is the reference's, in the reference's order. So the results
// are bit-identical to the per-output path (tests/test_gemm.py) and through it to llama.cpp.
//
// How. The per-output path unpacks a weight super-block, and reduces its integer lanes, once
// per (row, column). Here a tile of V::kLanes weight rows (one per 32-bit lane) is unpacked
// once (per super-block: the quants transposed so that int32 lane r of a register holds 4
// consecutive quants of row r, the scales and mins as int32/int16 per lane, d and dmin as
// floats) and then multiplied with every activation column, 4 columns at a time: one
// multiply-add takes 4 quants of each of the tile's rows against the same 4 activations of one
// column (a 32-bit broadcast straight from the block_q8_K row, which needs no packing), so every
// lane accumulates one output and no horizontal reduction is needed anywhere. The float epilogue
// is vectorized across outputs: lane r of a column's accumulator is output (r, c)'s own
// sequential chain.
//
// Integers, all exact: quants are unsigned (q4 < 16, q5 < 32, q6 < 64 before its -32 offset),
// activations int8, so a 4-byte multiply-add gives sub-block dots (V::dot_groups); times the
// sub-block scale (vpmulld) and summed. Mins (q4_K, q5_K) and q6_K's -32 offset come from the
// activation block sums with vpmaddwd on int16 pairs (scale or min pair of the row against bsum
// pair of the column).
//
// Everything is in an anonymous namespace, like quants_256.h: each ISA unit gets its own copy,
// compiled with its own flags.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// One super-block of a tile of Lanes rows (16 for AVX-512, 8 for AVX2: one row per 32-bit lane),
// unpacked for lane-per-row dot products.
template <int Lanes>
struct alignas(64) TileBlock {
    uint32_t q[QK_K / 4][Lanes];  // [group g][row]: the row's quants 4g..4g+3, one u8 each
    int32_t sc[16][Lanes];        // [sub-block][row] scales (q4_K/q5_K: 8 of 32 elements; q6_K: 16 of 16)
    uint32_t mp[8][Lanes];        // [pair][row] int16 pairs: q4_K/q5_K mins (m_2j, m_2j+1), j < 4;
                                  // q6_K scales (sc_2p, sc_2p+1), p < 8 (for the -32 offset)
    float d[Lanes];               // d_x
    float dmin[Lanes];            // dmin_x (0 for q6_K)
};

inline uint32_t pair16(int a, int b) { return (uint32_t)(uint16_t)(int16_t)a | ((uint32_t)(uint16_t)(int16_t)b << 16); }

// 256 quants of one row, element order, into lane r of the tile block.
template <int Lanes>
inline void store_quants(const uint8_t* e, TileBlock<Lanes>& t, int r) {
    for (int g = 0; g < QK_K / 4; ++g) {
        uint32_t v;
        std::memcpy(&v, e + 4 * g, 4);
        t.q[g][r] = v;
    }
}

// q4_K / q5_K: 8 scales then 8 mins, 6 bits each (ggml's get_scale_min_k4).
inline void scales_mins_k4(const uint8_t* s, int* sc, int* mn) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; ++j) {
        sc[j] = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// ---- weight types: unpack one super-block of one row into lane r ----------------------------

// q4_K / q5_K: d, dmin, the 8 scales and the mins as int16 pairs.
template <class Block, int Lanes>
inline void unpack_scales_mins(const Block& b, TileBlock<Lanes>& t, int r) {
    t.d[r] = h2f(b.d);
    t.dmin[r] = h2f(b.dmin);
    int sc[8], mn[8];
    scales_mins_k4(b.scales, sc, mn);
    for (int s = 0; s < 8; ++s) t.sc[s][r] = sc[s];
    for (int j = 0; j < 4; ++j) t.mp[j][r] = pair16(mn[2 * j], mn[2 * j + 1]);
}

struct Q4K {
    using block = block_q4_K;
    static constexpr int kSubs = 8;  // 32-element sub-blocks
    static constexpr bool kMin = true;
    static constexpr int kMaxQuant = 15;
    template <int Lanes>
    static void unpack(const block& b, TileBlock<Lanes>& t, int r) {
        unpack_scales_mins(b, t, r);
        alignas(32) uint8_t e[QK_K];
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int j = 0; j < 4; ++j) {  // elements 64j..64j+31: low nibbles, then high nibbles
            const __m256i bits = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * j));
            _mm256_store_si256((__m256i*)(e + 64 * j), _mm256_and_si256(bits, m4));
            _mm256_store_si256((__m256i*)(e + 64 * j + 32), _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4));
        }
        store_quants(e, t, r);
    }
};

struct Q5K {
    using block = block_q5_K;
    static constexpr int kSubs = 8;
    static constexpr bool kMin = true;
    static constexpr int kMaxQuant = 31;
    template <int Lanes>
    static void unpack(const block& b, TileBlock<Lanes>& t, int r) {
        unpack_scales_mins(b, t, r);
        alignas(32) uint8_t e[QK_K];
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i hbits = _mm256_loadu_si256((const __m256i*)b.qh);
        for (int j = 0; j < 4; ++j) {  // fifth bit of sub-block 2j (2j + 1): bit 2j (2j + 1) of qh
            const __m256i bits = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * j));
            const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one), 4);
            const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one), 4);
            _mm256_store_si256((__m256i*)(e + 64 * j), _mm256_or_si256(_mm256_and_si256(bits, m4), h0));
            _mm256_store_si256((__m256i*)(e + 64 * j + 32),
                               _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), h1));
        }
        store_quants(e, t, r);
    }
};

struct Q6K {
    using block = block_q6_K;
    static constexpr int kSubs = 16;  // 16-element sub-blocks
    static constexpr bool kMin = false;
    static constexpr int kMaxQuant = 63;
    template <int Lanes>
    static void unpack(const block& b, TileBlock<Lanes>& t, int r) {
        t.d[r] = h2f(b.d);
        t.dmin[r] = 0.0f;
        for (int s = 0; s < 16; ++s) t.sc[s][r] = b.scales[s];
        for (int p = 0; p < 8; ++p) t.mp[p][r] = pair16(b.scales[2 * p], b.scales[2 * p + 1]);
        alignas(32) uint8_t e[QK_K];
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i m3 = _mm256_set1_epi8(3);
        for (int h = 0; h < 2; ++h) {  // elements 128h + 32k + l: nibbles of ql, top 2 bits of qh
            const __m256i lo1 = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h));
            const __m256i lo2 = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i*)(b.qh + 32 * h));
            const __m256i q[4] = {
                _mm256_and_si256(lo1, m4),
                _mm256_and_si256(lo2, m4),
                _mm256_and_si256(_mm256_srli_epi16(lo1, 4), m4),
                _mm256_and_si256(_mm256_srli_epi16(lo2, 4), m4),
            };
            for (int k = 0; k < 4; ++k) {
                const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m3), 4);
                _mm256_store_si256((__m256i*)(e + 128 * h + 32 * k), _mm256_or_si256(q[k], top));
            }
        }
        store_quants(e, t, r);
    }
};

// ---- the GEMM over a unit's vector traits V ----------------------------------------------------

// What a unit provides (struct V): kLanes, the vector types I (int32 lanes) and F (float lanes),
// their loads, the arithmetic below, store (the first mr lanes) and dot_groups<W, C>, which adds
// to p[c] the exact dot of each lane's quants in 4-quant groups [g0, g1) with column c's
// activations.

// Column c's 32-element block sums of sub-blocks 2j and 2j+1, as an int16 pair in every lane.
template <class V>
inline typename V::I bsum_pair32(const block_q8_K& y, int j) {
    const int16_t* b = y.bsums + 4 * j;
    return V::set1((int32_t)pair16(b[0] + b[1], b[2] + b[3]));
}

template <class V>
inline typename V::I bcast32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return V::set1(v);
}

// sum over sub-block s of sc_s * dot(q_s, q8_s) for C columns, lane r = row r.
template <class V, class W, int C>
inline void sub_block_dots(const TileBlock<V::kLanes>& t, int s, const block_q8_K* const* yb, int i, typename V::I* isum) {
    constexpr int kGroups = QK_K / 4 / W::kSubs;  // 4-quant groups per sub-block
    typename V::I p[C];
    for (int c = 0; c < C; ++c) p[c] = V::zero();
    V::template dot_groups<W, C>(t.q, kGroups * s, kGroups * (s + 1), yb, i, p);
    const typename V::I sc = V::load(t.sc[s]);
    for (int c = 0; c < C; ++c) isum[c] = V::add(isum[c], V::mullo(p[c], sc));
}

// ---- register tiles: kLanes rows x C columns -------------------------------------------------

// vec_dot_q4_K_q8_K_repacked_gemm_256's order.
template <class V, int C>
void tile_repacked(const TileBlock<V::kLanes>* tb, int64_t nb, const block_q8_K* const* yb, float* y, int64_t ldy,
                   int mr) {
    using F = typename V::F;
    using I = typename V::I;
    F acc[C], acc_m[C];
    for (int c = 0; c < C; ++c) acc[c] = acc_m[c] = V::zerof();
    for (int64_t i = 0; i < nb; ++i) {
        const TileBlock<V::kLanes>& t = tb[i];
        const F dx = V::loadf(t.d), dmx = V::loadf(t.dmin);
        for (int j = 0; j < 4; ++j) {
            I isum[C];
            for (int c = 0; c < C; ++c) isum[c] = V::zero();
            sub_block_dots<V, Q4K, C>(t, 2 * j, yb, (int)i, isum);
            sub_block_dots<V, Q4K, C>(t, 2 * j + 1, yb, (int)i, isum);
            const I mp = V::load(t.mp[j]);
            for (int c = 0; c < C; ++c) {
                // h2f(x.d) * y.d, h2f(x.dmin) * y.d: rounded products, as the reference
                const F dy = V::set1f(yb[c][i].d);
                const I imin = V::madd16(mp, bsum_pair32<V>(yb[c][i], j));
                acc[c] = V::fmadd(V::cvt(isum[c]), V::mul(dx, dy), acc[c]);
                acc_m[c] = V::fmadd(V::cvt(imin), V::mul(dmx, dy), acc_m[c]);
            }
        }
    }
    for (int c = 0; c < C; ++c) V::store(y + c * ldy, V::subf(acc[c], acc_m[c]), mr);
}

// vec_dot_tiled_256's order.
template <class V, class W, int C>
void tile_tiled(const TileBlock<V::kLanes>* tb, int64_t nb, const block_q8_K* const* yb, float* y, int64_t ldy,
                int mr) {
    using F = typename V::F;
    using I = typename V::I;
    F acc[C];
    for (int c = 0; c < C; ++c) acc[c] = V::zerof();
    for (int64_t i = 0; i < nb; ++i) {
        const TileBlock<V::kLanes>& t = tb[i];
        I isum[C], imin[C];
        for (int c = 0; c < C; ++c) isum[c] = imin[c] = V::zero();
        for (int s = 0; s < W::kSubs; ++s) sub_block_dots<V, W, C>(t, s, yb, (int)i, isum);
        if (W::kMin) {  // summ = sum_j m_2j bsum_2j + m_2j+1 bsum_2j+1
            for (int j = 0; j < 4; ++j) {
                const I mp = V::load(t.mp[j]);
                for (int c = 0; c < C; ++c) imin[c] = V::add(imin[c], V::madd16(mp, bsum_pair32<V>(yb[c][i], j)));
            }
        } else {  // q6_K: sumi -= 32 * sum_s sc_s bsum_s
            for (int p = 0; p < 8; ++p) {
                const I mp = V::load(t.mp[p]);
                for (int c = 0; c < C; ++c)
                    imin[c] = V::add(imin[c], V::madd16(mp, bcast32<V>(yb[c][i].bsums + 2 * p)));
            }
            for (int c = 0; c < C; ++c) isum[c] = V::sub(isum[c], V::times32(imin[c]));
        }
        const F dx = V::loadf(t.d);
        for (int c = 0; c < C; ++c) {
            F r = V::mul(V::cvt(isum[c]), dx);
            if (W::kMin) r = V::fnmadd(V::loadf(t.dmin), V::cvt(imin[c]), r);
            acc[c] = V::fmadd(r, V::set1f(yb[c][i].d), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) V::store(y + c * ldy, acc[c], mr);
}

template <class V, class W, int C, bool kRepacked>
void tile(const TileBlock<V::kLanes>* tb, int64_t nb, const block_q8_K* const* yb, float* y, int64_t ldy, int mr) {
    if constexpr (kRepacked) tile_repacked<V, C>(tb, nb, yb, y, ldy, mr);
    else tile_tiled<V, W, C>(tb, nb, yb, y, ldy, mr);
}

// Row tiles of kLanes (unpacked once into a thread-local buffer), then columns 4 at a time.
template <class V, class W, bool kRepacked>
void kquant_gemm(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                 float* y, int64_t ldy) {
    constexpr int kLanes = V::kLanes;
    constexpr int kColTile = 4;  // activation columns per register tile
    using Tile = TileBlock<kLanes>;
    using block = typename W::block;
    const int64_t nb = k / QK_K;
    thread_local std::vector<Tile> buf;  // [nb], the current row tile
    if ((int64_t)buf.size() < nb) buf.resize(nb);
    Tile* tb = buf.data();
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* ab = static_cast<const uint8_t*>(a);
    for (int64_t r0 = 0; r0 < m; r0 += kLanes) {
        const int mr = (int)std::min<int64_t>(kLanes, m - r0);
        if (mr < kLanes) std::memset((void*)tb, 0, sizeof(Tile) * nb);  // lanes past the last row: zeros, not stored
        for (int r = 0; r < mr; ++r) {
            const block* x = (const block*)(wb + (r0 + r) * w_stride);
            for (int64_t i = 0; i < nb; ++i) W::unpack(x[i], tb[i], r);
        }
        for (int64_t c0 = 0; c0 < n; c0 += kColTile) {
            const int nc = (int)std::min<int64_t>(kColTile, n - c0);
            const block_q8_K* yb[kColTile];
            for (int c = 0; c < nc; ++c) yb[c] = (const block_q8_K*)(ab + (c0 + c) * a_stride);
            float* yc = y + c0 * ldy + r0;
            switch (nc) {
                case 4: tile<V, W, 4, kRepacked>(tb, nb, yb, yc, ldy, mr); break;
                case 3: tile<V, W, 3, kRepacked>(tb, nb, yb, yc, ldy, mr); break;
                case 2: tile<V, W, 2, kRepacked>(tb, nb, yb, yc, ldy, mr); break;
                default: tile<V, W, 1, kRepacked>(tb, nb, yb, yc, ldy, mr); break;
            }
        }
    }
}

// The table entries of a unit: Q4_K in both orders, Q5_K and Q6_K in the tiled one.
template <class V>
void fill_kquant_gemms(KernelTable& t) {
    t.types[TYPE_Q4_K].gemm_ggml_repack = kquant_gemm<V, Q4K, true>;
    t.types[TYPE_Q4_K].gemm_ggml_tiled = kquant_gemm<V, Q4K, false>;
    t.types[TYPE_Q5_K].gemm_ggml_tiled = kquant_gemm<V, Q5K, false>;
    t.types[TYPE_Q6_K].gemm_ggml_tiled = kquant_gemm<V, Q6K, false>;
}

}  // namespace
}  // namespace ei
