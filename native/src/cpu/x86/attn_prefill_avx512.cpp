// The tiled F16 attention (kernels.h, AttnF16Tile) for AVX-512 tables: the AVX2 kernel's
// operations lane for lane (attn_prefill_avx2.cpp has the method), so both tables give the same
// bits, with two differences in how the work is arranged, neither of which changes a value:
//
// - Rows that see the same keys of a block (the heads of one token; every token, in a block all
//   of them see whole) go through it up to four at a time: each load of K^T and V serves all of
//   them. One row at a time, every FMA of the scores and of the V sums came with its own load.
// - Scores are computed only for the 16-key vectors up to the last key a row sees. The AVX2
//   kernel computes all 64 and masks the rest to weight 0; a masked weight adds nothing to the
//   row's sum (its weights are >= 0, its sum starts at +0) and its V term is never taken.
#include <immintrin.h>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -Wall at -O3
// then reports as (maybe-)uninitialized inside the headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cmath>

#include "cpu/kernels.h"
#include "cpu/x86/attn_tile_avx2.h"
#include "cpu/x86/expf_avx2.h"

namespace ei {
namespace {

constexpr int kZ = (int)(KB / 16);  // 16-key vectors a block
constexpr int kMaxRows = 4;         // rows through a block together (4 x 4 accumulators)

// What one run of rows through a block shares: the converted keys, the rows' common key range.
struct Block {
    const float* kT;  // [hd][KB]
    const float* vb;  // [KB][hd]
    int64_t j_lo, j_hi;
};

// acc[r] = acc[r] * alpha[r] + sum_{j_lo <= j <= j_hi} p[r][j] v_j over NZ registers of 16 values
// from value d0 (the last register's lanes under `last`), each v_j loaded once for the NR rows
// (o[r * NZ + i]: flat, as block_scores' sums).
template <int NR, int NZ>
void accumulate_v(const Block& b, int64_t hd, int64_t d0, __mmask16 last, float* const* acc, const float (*p)[KB],
                  const float* alpha) {
    __m512 o[NR * NZ];
#pragma GCC unroll 16
    for (int x = 0; x < NR * NZ; ++x) {
        const int r = x / NZ, i = x % NZ;
        o[x] = _mm512_mul_ps(_mm512_maskz_loadu_ps(i + 1 < NZ ? 0xFFFF : last, acc[r] + d0 + 16 * i), _mm512_set1_ps(alpha[r]));
    }
    for (int64_t j = b.j_lo; j <= b.j_hi; ++j) {
        const float* vj = b.vb + j * hd + d0;
        __m512 v[NZ];
#pragma GCC unroll 4
        for (int i = 0; i < NZ; ++i) v[i] = _mm512_maskz_loadu_ps(i + 1 < NZ ? 0xFFFF : last, vj + 16 * i);
#pragma GCC unroll 16
        for (int x = 0; x < NR * NZ; ++x) o[x] = _mm512_fmadd_ps(_mm512_set1_ps(p[x / NZ][j]), v[x % NZ], o[x]);
    }
#pragma GCC unroll 16
    for (int x = 0; x < NR * NZ; ++x) _mm512_mask_storeu_ps(acc[x / NZ] + d0 + 16 * (x % NZ), x % NZ + 1 < NZ ? 0xFFFF : last, o[x]);
}

// The scores of NR rows against the block's first NS 16-key vectors into s[r] (unscaled). The sums
// in a flat array, the loops unrolled: GCC keeps that in registers over the head, where it
// stored a two-dimensional one back to the stack every iteration.
template <int NR, int NS>
inline void block_scores(const float* kT, int64_t hd, const float* const* q, float (*s)[KB]) {
    __m512 acc[NR * NS];
#pragma GCC unroll 16
    for (int x = 0; x < NR * NS; ++x) acc[x] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
        const float* kd = kT + d * KB;
        __m512 k[NS];
#pragma GCC unroll 4
        for (int u = 0; u < NS; ++u) k[u] = _mm512_loadu_ps(kd + 16 * u);
#pragma GCC unroll 16
        for (int x = 0; x < NR * NS; ++x) acc[x] = _mm512_fmadd_ps(_mm512_set1_ps(q[x / NS][d]), k[x % NS], acc[x]);
    }
#pragma GCC unroll 16
    for (int x = 0; x < NR * NS; ++x) _mm512_store_ps(s[x / NS] + 16 * (x % NS), acc[x]);
}

// NR rows (queries q[r], running max/sum at row_max[r]/row_sum[r], accumulators acc[r]) through
// one block, scores for its first NS 16-key vectors (those up to b.j_hi).
template <int NR, int NS>
void rows_through_block(const Block& b, int64_t hd, float scale, const float* const* q, float* const* acc,
                        float* const* row_max, float* const* row_sum) {
    alignas(64) float p[NR][KB];  // the scores, then the weights
    block_scores<NR, NS>(b.kT, hd, q, p);
    // Keys j_lo..j_hi of the block, 16 a vector.
    const uint64_t upto = b.j_hi >= 63 ? ~0ull : (1ull << (b.j_hi + 1)) - 1;
    const uint64_t keys = upto & ~((1ull << b.j_lo) - 1);
    __mmask16 valid[NS];
    for (int u = 0; u < NS; ++u) valid[u] = (__mmask16)(keys >> (16 * u));
    const __m512 sc = _mm512_set1_ps(scale);
    float alpha[NR];
    for (int r = 0; r < NR; ++r) {
        __m512 mx = _mm512_set1_ps(-INFINITY), s[NS];
        for (int u = 0; u < NS; ++u) {
            s[u] = _mm512_mul_ps(_mm512_load_ps(p[r] + 16 * u), sc);
            mx = _mm512_mask_max_ps(mx, valid[u], mx, s[u]);
        }
        const float m_old = *row_max[r], m_new = std::max(m_old, _mm512_reduce_max_ps(mx));
        const __m512 mv = _mm512_set1_ps(m_new);
        // The AVX2 kernel's lane sums: its 8-key vectors in key order, then hsum8.
        __m256 sum = _mm256_setzero_ps();
        for (int u = 0; u < NS; ++u) {
            const __m512 w =
                _mm512_maskz_mov_ps(valid[u], expf8_order_x16(_mm512_maskz_sub_ps(valid[u], s[u], mv)));
            _mm512_store_ps(p[r] + 16 * u, w);
            sum = _mm256_add_ps(sum, _mm512_castps512_ps256(w));
            sum = _mm256_add_ps(sum, _mm512_extractf32x8_ps(w, 1));
        }
        alpha[r] = m_old == -INFINITY ? 0.0f : std::exp(m_old - m_new);
        *row_sum[r] = *row_sum[r] * alpha[r] + hsum8(sum);
        *row_max[r] = m_new;
    }
    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
        const int pieces = (int)(std::min<int64_t>(64, hd - d0) / 8);  // of 8 values (hd is a multiple of 8)
        const __mmask16 last = pieces % 2 ? 0x00FF : 0xFFFF;
        switch ((pieces + 1) / 2) {
            case 4: accumulate_v<NR, 4>(b, hd, d0, last, acc, p, alpha); break;
            case 3: accumulate_v<NR, 3>(b, hd, d0, last, acc, p, alpha); break;
            case 2: accumulate_v<NR, 2>(b, hd, d0, last, acc, p, alpha); break;
            default: accumulate_v<NR, 1>(b, hd, d0, last, acc, p, alpha); break;
        }
    }
}

template <int NR>
void rows_through_block(int ns, const Block& b, int64_t hd, float scale, const float* const* q, float* const* acc,
                        float* const* row_max, float* const* row_sum) {
    switch (ns) {
        case 4: return rows_through_block<NR, 4>(b, hd, scale, q, acc, row_max, row_sum);
        case 3: return rows_through_block<NR, 3>(b, hd, scale, q, acc, row_max, row_sum);
        case 2: return rows_through_block<NR, 2>(b, hd, scale, q, acc, row_max, row_sum);
        default: return rows_through_block<NR, 1>(b, hd, scale, q, acc, row_max, row_sum);
    }
}

void attn_f16_tile_avx512(const AttnF16Tile& a) {
    const int64_t hd = a.head_dim, rows = a.n_tok * a.group;
    const TileScratch sc(a);
    float *const kT = sc.kT, *const vb = sc.vb, *const acc = sc.acc, *const row_max = sc.row_max,
                 *const row_sum = sc.row_sum;
    auto first_of = [&](int64_t last) { return a.window > 0 ? std::max<int64_t>(0, last - a.window + 1) : 0; };
    const int64_t last_max = a.last0 + a.n_tok - 1;

    for (int64_t kb0 = first_of(a.last0); kb0 <= last_max; kb0 += KB) {
        const int64_t nk = std::min(KB, last_max - kb0 + 1);
        load_block(a, kb0, nk, kT, vb);
        auto range_of = [&](int64_t r, int64_t* lo, int64_t* hi) {
            const int64_t last = a.last0 + r / a.group;
            *lo = std::max<int64_t>(first_of(last) - kb0, 0);
            *hi = std::min(last - kb0, nk - 1);
        };
        for (int64_t r0 = 0; r0 < rows;) {
            Block b{kT, vb, 0, 0};
            range_of(r0, &b.j_lo, &b.j_hi);
            int nr = 1;  // the following rows with the same range join, up to kMaxRows
            for (int64_t lo, hi; nr < kMaxRows && r0 + nr < rows; ++nr) {
                range_of(r0 + nr, &lo, &hi);
                if (lo != b.j_lo || hi != b.j_hi) break;
            }
            if (b.j_lo <= b.j_hi) {
                const float* q[kMaxRows];
                float *acc_r[kMaxRows], *max_r[kMaxRows], *sum_r[kMaxRows];
                for (int i = 0; i < nr; ++i) {
                    const int64_t r = r0 + i, t = r / a.group, g = r % a.group;
                    q[i] = a.q + t * a.q_token_stride + g * hd;
                    acc_r[i] = acc + r * hd;
                    max_r[i] = row_max + r;
                    sum_r[i] = row_sum + r;
                }
                const int ns = (int)(b.j_hi / 16) + 1;
                switch (nr) {
                    case 4: rows_through_block<4>(ns, b, hd, a.scale, q, acc_r, max_r, sum_r); break;
                    case 3: rows_through_block<3>(ns, b, hd, a.scale, q, acc_r, max_r, sum_r); break;
                    case 2: rows_through_block<2>(ns, b, hd, a.scale, q, acc_r, max_r, sum_r); break;
                    default: rows_through_block<1>(ns, b, hd, a.scale, q, acc_r, max_r, sum_r); break;
                }
            }
            r0 += nr;
        }
    }
    finish_tile(a, sc);
}

}  // namespace

void fill_attn_prefill_avx512(OpKernels& ops) { ops.attn_f16_tile = attn_f16_tile_avx512; }

}  // namespace ei
