// What the tiled F16 attention kernels of both x86 tables share (attn_prefill_avx2.cpp,
// attn_prefill_avx512.cpp): a block of keys converted to F32 once for all of a tile's rows, and
// the horizontal reductions of the AVX2 kernel's order, which the AVX-512 one reproduces so that
// both give the same bits. In an anonymous namespace, as expf_avx2.h: each translation unit that
// includes it is compiled with AVX2 (or wider) flags and keeps its own copy.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/attn_sink.h"
#include "cpu/kernels.h"
#include "cpu/prefetch_rows.h"

namespace ei {
namespace {

constexpr int64_t KB = kAttnTileKeys;

inline float hmax8(__m256 x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

inline float hsum8(__m256 x) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// r[i] (row i of an 8x8 block) becomes column i.
inline void transpose8(__m256* r) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Requests a row of the cache into L2 (a prefetch: no value changes). A plain function: GCC 12
// dropped these prefetches when they were written in a lambda with an early return.
inline void request_row(const uint16_t* row, int64_t bytes) { request_bytes(row, bytes); }

// Keys kb0..kb0+nk-1 into kT [hd][KB] (columns nk.. zero) and vb [KB][hd]. K goes over in 8x8
// blocks transposed in registers; a copy changes no value.
void load_block(const AttnF16Tile& a, int64_t kb0, int64_t nk, float* kT, float* vb) {
    const int64_t hd = a.head_dim;
    // The same head's next block is requested while this one converts: the keys come from memory
    // (a long context's cache is far larger than L2) and the hardware prefetcher does not follow
    // a head's slices of the position rows far enough ahead.
    const int64_t last = a.last0 + a.n_tok - 1, next = kb0 + KB;
    const int64_t next_keys = std::min<int64_t>(KB, last - next + 1);
    const int64_t row_bytes = hd * (int64_t)sizeof(uint16_t);
    for (int64_t j0 = 0; j0 < KB; j0 += 8) {
        for (int64_t j = j0; j < std::min(j0 + 8, next_keys); ++j)
            request_row(a.k + (next + j) * a.kv_stride, row_bytes);
        for (int64_t d = 0; d < hd; d += 8) {
            __m256 r[8];
            const uint16_t* kr = a.k + (kb0 + j0) * a.kv_stride + d;
            if (j0 + 8 <= nk) {
                for (int i = 0; i < 8; ++i) r[i] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(kr + i * a.kv_stride)));
            } else {
                for (int i = 0; i < 8; ++i)
                    r[i] = j0 + i < nk ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(kr + i * a.kv_stride)))
                                       : _mm256_setzero_ps();
            }
            transpose8(r);
            for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kT + (d + i) * KB + j0, r[i]);
        }
    }
    for (int64_t j = 0; j < nk; ++j) {
        if (j < next_keys) request_row(a.v + (next + j) * a.kv_stride, row_bytes);
        const uint16_t* vr = a.v + (kb0 + j) * a.kv_stride;
        for (int64_t d = 0; d < hd; d += 8)
            _mm256_storeu_ps(vb + j * hd + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(vr + d))));
    }
}

// A tile's scratch (kernels.h, attn_f16_tile_scratch_floats) and its rows' state, reset.
struct TileScratch {
    float* kT;       // [hd][KB] the block's keys, transposed
    float* vb;       // [KB][hd] its values
    float* acc;      // [rows][hd] unnormalized outputs
    float* row_max;  // [rows] running max of the scores
    float* row_sum;  // [rows] running sum of exp(s - max)
    float* p;        // [KB] one row's weights in the current block
    explicit TileScratch(const AttnF16Tile& a) {
        const int64_t hd = a.head_dim, rows = a.n_tok * a.group;
        kT = a.scratch;
        vb = kT + hd * KB;
        acc = vb + KB * hd;
        row_max = acc + rows * hd;
        row_sum = row_max + rows;
        p = row_sum + rows;
        std::fill(acc, acc + rows * hd, 0.0f);
        std::fill(row_max, row_max + rows, -INFINITY);
        std::fill(row_sum, row_sum + rows, 0.0f);
    }
};

// The rows' normalized outputs.
inline void finish_tile(const AttnF16Tile& a, const TileScratch& s) {
    const int64_t hd = a.head_dim, rows = a.n_tok * a.group;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = r / a.group, g = r % a.group;
        float ms = 1.0f;
        if (a.sinks) ms = attention_sink_step(a.sinks[g], s.row_max[r], s.row_sum[r]);
        const float inv = s.row_sum[r] == 0.0f ? 0.0f : 1.0f / s.row_sum[r];
        float* o = a.out + t * a.q_token_stride + g * hd;
        if (a.sinks)
            for (int64_t d = 0; d < hd; ++d) o[d] = s.acc[r * hd + d] * ms * inv;
        else
            for (int64_t d = 0; d < hd; ++d) o[d] = s.acc[r * hd + d] * inv;
    }
}

}  // namespace
}  // namespace ei
