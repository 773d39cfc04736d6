// AVX2 tiled GEMM for the 32-element block types (prefill: many activation columns), every
// output bit-identical to the AVX2 vec_dot (cpu/x86/quants_256.h, which mirrors ggml's AVX2
// kernels): per block, the 32 products summed into 8 int32 lanes (VPMADDUBSW + VPMADDWD, the
// signed types through the sign trick), converted, FMA'd with the float d_w * d_a into an
// 8-lane accumulator; q4_1/q5_1 sum m_w * s_a in a separate scalar FMA chain; hsum_float_8 at
// the end. The integer sums are exact whatever the method and the float operations are the
// vec_dot's, in its order, so matmul may use this instead of one vec_dot per output.
//
// Why it is faster: a weight block is unpacked once per row tile (values, |x| and the sign
// source for the signed types, d and m as floats) instead of once per (row, column), the
// activation block is loaded once for the tile's 4 rows, and 8 accumulators stay in registers.
//
// Loop order (like cpu/x86/gemm_avx512.cpp): tiles of 4 weight rows unpacked into a thread-local
// buffer (72 bytes a block and row, in L1), then every pair of activation columns.
//
// Q4_1 and Q5_0 weights repacked at load into 16-row groups (cpu/repack.h) take the same tiles
// for prompt chunks: only the unpacking reads the rows from their groups.
#include "cpu/x86/gemm_avx2.h"

#include "common/error.h"
#include "cpu/repack.h"
#include "quant/types.h"
#include "cpu/x86/quants_256.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

namespace ei {
namespace {

constexpr int kRows = 4;  // weight rows per register tile
constexpr int kCols = 2;  // activation columns per register tile

// One 32-element weight block, unpacked once per row tile.
struct RowBlock {
    uint8_t a[32];  // the multiplier bytes: the values (unsigned types) or |x| (signed types)
    int8_t x[32];   // signed types: x itself, whose sign goes onto the activations
    float d, m;     // d_w; m_w (q4_1 / q5_1)
};

struct Q4_0 {
    using block = block_q4_0;
    using act = block_q8_0;
    static constexpr bool kSigned = true, kMin = false;
    static __m256i q(const block& b) { return _mm256_sub_epi8(bytes_from_nibbles_32(b.qs), _mm256_set1_epi8(8)); }
    static float m(const block&) { return 0.0f; }
};
struct Q5_0 {
    using block = block_q5_0;
    using act = block_q8_0;
    static constexpr bool kSigned = true, kMin = false;
    static __m256i q(const block& b) {
        const __m256i hi = _mm256_andnot_si256(bytes_from_bits_32(b.qh), _mm256_set1_epi8((char)0xF0));
        return _mm256_or_si256(bytes_from_nibbles_32(b.qs), hi);
    }
    static float m(const block&) { return 0.0f; }
};
struct Q8_0 {
    using block = block_q8_0;
    using act = block_q8_0;
    static constexpr bool kSigned = true, kMin = false;
    static __m256i q(const block& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
    static float m(const block&) { return 0.0f; }
};
struct Q4_1 {
    using block = block_q4_1;
    using act = block_q8_1;
    static constexpr bool kSigned = false, kMin = true;
    static __m256i q(const block& b) { return bytes_from_nibbles_32(b.qs); }
    static float m(const block& b) { return h2f(b.m); }
};
struct Q5_1 {
    using block = block_q5_1;
    using act = block_q8_1;
    static constexpr bool kSigned = false, kMin = true;
    static __m256i q(const block& b) {
        const __m256i hi = _mm256_and_si256(bytes_from_bits_32(b.qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(bytes_from_nibbles_32(b.qs), hi);
    }
    static float m(const block& b) { return h2f(b.m); }
};

// Rows read from 16-row groups (cpu/repack.h) instead of as stored.
struct Q4_1Grouped : Q4_1 {};
struct Q5_0Grouped : Q5_0 {};
template <class W>
constexpr bool kFromGroups = false;
template <>
constexpr bool kFromGroups<Q4_1Grouped> = true;
template <>
constexpr bool kFromGroups<Q5_0Grouped> = true;

template <class W>
void unpack_row(const uint8_t* w, int64_t nb, RowBlock* out) {
    const typename W::block* x = (const typename W::block*)w;
    for (int64_t i = 0; i < nb; ++i) {
        const __m256i q = W::q(x[i]);
        if (W::kSigned) {
            _mm256_storeu_si256((__m256i*)out[i].a, _mm256_sign_epi8(q, q));
            _mm256_storeu_si256((__m256i*)out[i].x, q);
        } else {
            _mm256_storeu_si256((__m256i*)out[i].a, q);
        }
        out[i].d = h2f(x[i].d);
        out[i].m = W::m(x[i]);
    }
}

// Block i of row j of a group (cpu/repack.h), as it was stored.
template <class Block>
Block block_of_group(const uint8_t* grp, const PackedLayout& lay, int64_t j, int64_t i) {
    Block x;
    x.d = reinterpret_cast<const uint16_t*>(grp)[i * kPackRows + j];
    for (int t = 0; t < 4; ++t) std::memcpy(x.qs + 4 * t, grp + lay.qs + ((i * 4 + t) * kPackRows + j) * 4, 4);
    if constexpr (std::is_same_v<Block, block_q4_1>)
        x.m = reinterpret_cast<const uint16_t*>(grp + lay.m)[i * kPackRows + j];
    if constexpr (std::is_same_v<Block, block_q5_0>) {
        uint32_t bits = 0;
        for (int t = 0; t < 4; ++t) {
            const uint32_t h = grp[lay.qh + (i * 4 + t) * kPackRows + j];
            bits |= (h & 15) << (4 * t) | (h >> 4) << (16 + 4 * t);
        }
        std::memcpy(x.qh, &bits, 4);
    }
    return x;
}

// Row r of weights in groups of 16 (group_bytes apart), unpacked as unpack_row unpacks a stored row.
template <class W>
void unpack_grouped_row(const uint8_t* w, size_t group_bytes, int64_t r, int64_t nb, RowBlock* out) {
    using block = typename W::block;
    const PackedLayout lay = packed_layout(std::is_same_v<block, block_q4_1> ? TYPE_Q4_1 : TYPE_Q5_0, nb * 32);
    const uint8_t* grp = w + (r / kPackRows) * group_bytes;
    thread_local std::vector<block> row;
    row.resize(nb);
    for (int64_t i = 0; i < nb; ++i) row[i] = block_of_group<block>(grp, lay, r % kPackRows, i);
    unpack_row<W>(reinterpret_cast<const uint8_t*>(row.data()), nb, out);
}

inline float act_s(const block_q8_1& b) { return h2f(b.s); }
inline float act_s(const block_q8_0&) { return 0.0f; }

// R weight rows x C activation columns.
template <class W, int R, int C>
void tile(const RowBlock* const* rows, int64_t nb, const typename W::act* const* cols, float* y, int64_t ldy) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[R][C];
    float summs[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            acc[r][c] = _mm256_setzero_ps();
            summs[r][c] = 0.0f;
        }
    for (int64_t i = 0; i < nb; ++i) {
        __m256i qy[C];
        float dy[C], sy[C];
        for (int c = 0; c < C; ++c) {
            qy[c] = _mm256_loadu_si256((const __m256i*)cols[c][i].qs);
            dy[c] = h2f(cols[c][i].d);
            sy[c] = act_s(cols[c][i]);
        }
        for (int r = 0; r < R; ++r) {
            const RowBlock& b = rows[r][i];
            const __m256i a = _mm256_loadu_si256((const __m256i*)b.a);
            const __m256i sx = W::kSigned ? _mm256_loadu_si256((const __m256i*)b.x) : _mm256_setzero_si256();
            for (int c = 0; c < C; ++c) {
                if (W::kMin) summs[r][c] = std::fma(b.m, sy[c], summs[r][c]);
                const __m256i yv = W::kSigned ? _mm256_sign_epi8(qy[c], sx) : qy[c];
                const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(ones, _mm256_maddubs_epi16(a, yv)));
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(b.d * dy[c]), isum, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            const float v = hsum_float_8(acc[r][c]);
            y[c * ldy + r] = W::kMin ? v + summs[r][c] : v;
        }
}

template <class W, int R>
void tile_cols(const RowBlock* const* rows, int64_t nb, const uint8_t* a, size_t a_stride, int64_t n, float* y,
               int64_t ldy) {
    using act = typename W::act;
    const act* cols[kCols];
    for (int64_t c0 = 0; c0 < n; c0 += kCols) {
        const int nc = (int)std::min<int64_t>(kCols, n - c0);
        for (int c = 0; c < nc; ++c) cols[c] = (const act*)(a + (c0 + c) * a_stride);
        if (nc == 2) tile<W, R, 2>(rows, nb, cols, y + c0 * ldy, ldy);
        else tile<W, R, 1>(rows, nb, cols, y + c0 * ldy, ldy);
    }
}

template <class W>
void gemm(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, float* y,
          int64_t ldy) {
    const int64_t nb = k / 32;
    thread_local std::vector<RowBlock> unpacked;  // [kRows][nb]
    if ((int64_t)unpacked.size() < kRows * nb) unpacked.resize(kRows * nb);
    const RowBlock* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = unpacked.data() + r * nb;
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* ab = static_cast<const uint8_t*>(a);
    for (int64_t r0 = 0; r0 < m; r0 += kRows) {
        const int mr = (int)std::min<int64_t>(kRows, m - r0);
        for (int r = 0; r < mr; ++r) {
            if constexpr (kFromGroups<W>) unpack_grouped_row<W>(wb, w_stride, r0 + r, nb, unpacked.data() + r * nb);
            else unpack_row<W>(wb + (r0 + r) * w_stride, nb, unpacked.data() + r * nb);
        }
        switch (mr) {
            case 4: tile_cols<W, 4>(rows, nb, ab, a_stride, n, y + r0, ldy); break;
            case 3: tile_cols<W, 3>(rows, nb, ab, a_stride, n, y + r0, ldy); break;
            case 2: tile_cols<W, 2>(rows, nb, ab, a_stride, n, y + r0, ldy); break;
            default: tile_cols<W, 1>(rows, nb, ab, a_stride, n, y + r0, ldy); break;
        }
    }
}

}  // namespace

void gemm_grouped_avx2(uint32_t type, int64_t k, int64_t m, int64_t n, const void* w, size_t group_bytes,
                       const void* a, size_t a_stride, float* y, int64_t ldy) {
    if (type == TYPE_Q4_1) gemm<Q4_1Grouped>(k, m, n, w, group_bytes, a, a_stride, y, ldy);
    else if (type == TYPE_Q5_0) gemm<Q5_0Grouped>(k, m, n, w, group_bytes, a, a_stride, y, ldy);
    else throw Error(std::string("no grouped GEMM for ") + type_info(type).name);
}

void fill_gemm_avx2(KernelTable& t) {
    t.types[TYPE_Q4_0].gemm = gemm<Q4_0>;
    t.types[TYPE_Q4_1].gemm = gemm<Q4_1>;
    t.types[TYPE_Q5_0].gemm = gemm<Q5_0>;
    t.types[TYPE_Q5_1].gemm = gemm<Q5_1>;
    t.types[TYPE_Q8_0].gemm = gemm<Q8_0>;
}

}  // namespace ei
