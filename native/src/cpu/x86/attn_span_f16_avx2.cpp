// Attention of a few query rows over one span of an F16 cache (kernels.h, AttnF16Tile in span
// mode): what decode steps and batches of fewer than kAttnTileMinRows tokens run in the fast
// float order (layers/cpu_blocks.cpp, attention_f16_spans). The AVX2 and AVX-512 tables both
// take it, so both give the same bits.
//
// The tiled prompt kernel (attn_prefill_avx2.cpp) converts a block's K (transposed) and V to F32
// in scratch once for all of a prompt chunk's rows. A decode step has only one token's rows (4 for
// Gemma 3, 3 for SmolLM2): converting was then as much work as the attention itself, and the F32
// copies (2 x 64 KB at head_dim 256) came back from L2 for every row. Here K and V are converted
// in registers where they are used, each conversion serving a tile of up to 4 rows:
//   - scores: two keys at a time against the tile's rows, 8 dimensions per FMA; the 8 lanes of
//     each (row, key) sum are then added up together with 7 other keys' (hsum_8x8);
//   - each row's softmax over its keys of the span (ggml's expf8, as the tiled kernel);
//   - V: 16 values at a time for the tile's rows, key by key in position order.
// A row's floats depend only on its query and the keys it sees: a key outside a row's range has
// weight 0 in that row's sums, which leaves them unchanged (V is finite), so a row decoded in a
// batch gets the bits it gets alone.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/kernels.h"
#include "cpu/x86/attn_tile_avx2.h"
#include "cpu/x86/expf_avx2.h"
#include "cpu/x86/quants_256.h"

namespace ei {
namespace {

constexpr int kTileRows = 4;  // 2 keys x 4 rows = 8 score sums, 2 x 4 V sums: registers to spare

// Lane j: the sum of v[j]'s 8 lanes.
inline __m256 hsum_8x8(const __m256* v) {
    const __m256 ab = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 cd = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(ab, cd, 0x20), _mm256_permute2f128_ps(ab, cd, 0x31));
}

// The tile's rows: their queries, key ranges within the span, and partial results.
struct TileRows {
    const float* q[kTileRows];
    float* part[kTileRows];
    int64_t lo[kTileRows], hi[kTileRows];  // keys lo..hi of the span (lo > hi: none)
};

// Scaled scores s[r][j] of the span's keys 0 .. nk - 1, in groups of 8 (a last partial group
// reads key nk - 1 again; those lanes are outside every row's range).
// The next span's first n_next keys are requested meanwhile (see attn_f16_span_avx2).
template <int NR>
void tile_scores(const AttnF16Tile& a, const TileRows& t, const uint16_t* k0, int64_t nk, int64_t n_next,
                 float (*s)[KB]) {
    const int64_t hd = a.head_dim;
    const __m256 scale = _mm256_set1_ps(a.scale);
    for (int64_t j0 = 0; j0 < nk; j0 += 8) {
        __m256 dots[NR][8];
        for (int jj = 0; jj < 8; jj += 2) {
            for (int64_t j = j0 + jj; j < std::min(j0 + jj + 2, n_next); ++j)
                request_row(k0 + (KB + j) * a.kv_stride, hd * (int64_t)sizeof(uint16_t));
            const uint16_t* ka = k0 + std::min(j0 + jj, nk - 1) * a.kv_stride;
            const uint16_t* kb = k0 + std::min(j0 + jj + 1, nk - 1) * a.kv_stride;
            __m256 sa[NR], sb[NR];
            for (int r = 0; r < NR; ++r) sa[r] = sb[r] = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; d += 8) {
                const __m256 xa = load_f16x8(ka + d), xb = load_f16x8(kb + d);
                for (int r = 0; r < NR; ++r) {
                    const __m256 qv = _mm256_loadu_ps(t.q[r] + d);
                    sa[r] = _mm256_fmadd_ps(qv, xa, sa[r]);
                    sb[r] = _mm256_fmadd_ps(qv, xb, sb[r]);
                }
            }
            for (int r = 0; r < NR; ++r) {
                dots[r][jj] = sa[r];
                dots[r][jj + 1] = sb[r];
            }
        }
        for (int r = 0; r < NR; ++r) _mm256_storeu_ps(s[r] + j0, _mm256_mul_ps(hsum_8x8(dots[r]), scale));
    }
}

// Row scores s (nk of them, in groups of 8) become weights exp(s - m) over keys lo..hi, 0
// elsewhere; m and their sum l are the row's (-inf and 0 if it sees none of the keys).
void row_softmax(float* s, int64_t nk, int64_t lo, int64_t hi, float* m, float* l) {
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 vlo = _mm256_set1_ps((float)lo), vhi = _mm256_set1_ps((float)hi);
    auto valid = [&](int64_t j0) {
        const __m256 idx = _mm256_add_ps(lane, _mm256_set1_ps((float)j0));
        return _mm256_and_ps(_mm256_cmp_ps(idx, vlo, _CMP_GE_OQ), _mm256_cmp_ps(idx, vhi, _CMP_LE_OQ));
    };
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (int64_t j0 = 0; j0 < nk; j0 += 8)
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(s + j0), valid(j0)));
    *m = hmax8(mx);
    const __m256 mv = _mm256_set1_ps(*m);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < nk; j0 += 8) {
        // Lanes outside the range take exp(0) and are zeroed afterwards (no infinities in expf8).
        const __m256 ok = valid(j0);
        const __m256 w = _mm256_and_ps(expf8(_mm256_and_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j0), mv), ok)), ok);
        _mm256_storeu_ps(s + j0, w);
        sum = _mm256_add_ps(sum, w);
    }
    *l = hsum8(sum);
}

// part[r][d] = sum_{lo <= j <= hi} p[r][j] v_j[d] for NV registers of 8 values from d0, the
// tile's keys lo..hi (the union of its rows' ranges) in order; the next span's first n_next
// value rows are requested meanwhile.
template <int NR, int NV>
void tile_values(const AttnF16Tile& a, const TileRows& t, const uint16_t* v0, const float (*p)[KB], int64_t lo,
                 int64_t hi, int64_t d0, int64_t n_next) {
    __m256 o[NR][NV];
    for (int r = 0; r < NR; ++r)
        for (int i = 0; i < NV; ++i) o[r][i] = _mm256_setzero_ps();
    for (int64_t j = lo; j <= hi; ++j) {
        if (j < n_next) request_row(v0 + (KB + j) * a.kv_stride, a.head_dim * (int64_t)sizeof(uint16_t));
        const uint16_t* vj = v0 + j * a.kv_stride + d0;
        __m256 x[NV];
        for (int i = 0; i < NV; ++i) x[i] = load_f16x8(vj + 8 * i);
        for (int r = 0; r < NR; ++r) {
            const __m256 pj = _mm256_broadcast_ss(p[r] + j);
            for (int i = 0; i < NV; ++i) o[r][i] = _mm256_fmadd_ps(pj, x[i], o[r][i]);
        }
    }
    for (int r = 0; r < NR; ++r)
        for (int i = 0; i < NV; ++i) _mm256_storeu_ps(t.part[r] + d0 + 8 * i, o[r][i]);
}

template <int NR>
void span_tile(const AttnF16Tile& a, const TileRows& t, int64_t nk, int64_t n_next) {
    const int64_t hd = a.head_dim;
    const uint16_t* k0 = a.k + a.k_first * a.kv_stride;
    const uint16_t* v0 = a.v + a.k_first * a.kv_stride;
    alignas(32) float p[NR][KB];
    tile_scores<NR>(a, t, k0, nk, n_next, p);
    int64_t lo = nk, hi = -1;
    for (int r = 0; r < NR; ++r) {
        row_softmax(p[r], nk, t.lo[r], t.hi[r], t.part[r] + hd, t.part[r] + hd + 1);
        if (t.lo[r] <= t.hi[r]) {
            lo = std::min(lo, t.lo[r]);
            hi = std::max(hi, t.hi[r]);
        }
    }
    int64_t d0 = 0;
    for (; d0 + 16 <= hd; d0 += 16) tile_values<NR, 2>(a, t, v0, p, lo, hi, d0, d0 == 0 ? n_next : 0);
    if (d0 < hd) tile_values<NR, 1>(a, t, v0, p, lo, hi, d0, d0 == 0 ? n_next : 0);  // head_dim: a multiple of 8
}

void attn_f16_span_avx2(const AttnF16Tile& a) {
    const int64_t hd = a.head_dim, rows = a.n_tok * a.group;
    const int64_t nk = std::min(KB, a.last0 + a.n_tok - a.k_first);
    // The first tile requests the next span's rows of this head, which the caller's task takes
    // a few jobs later: a head's slices of the position rows are strided (SmolLM2: 128 of every
    // 384 bytes), and the hardware prefetcher did not keep up with them.
    int64_t n_next = std::max<int64_t>(0, std::min(KB, a.last0 + a.n_tok - a.k_first - KB));
    // This span's own rows are requested all at once first: a task's first span had no
    // predecessor to request them (a decode step's only span, below 64 cached positions), and
    // the kernel's dependent loads alone kept few misses in flight. Rows already requested are
    // cache hits for these.
    const int64_t row_bytes = hd * (int64_t)sizeof(uint16_t);
    for (int64_t j = 0; j < nk; ++j) request_row(a.k + (a.k_first + j) * a.kv_stride, row_bytes);
    for (int64_t j = 0; j < nk; ++j) request_row(a.v + (a.k_first + j) * a.kv_stride, row_bytes);
    for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
        const int nr = (int)std::min<int64_t>(kTileRows, rows - r0);
        TileRows t;
        for (int i = 0; i < nr; ++i) {
            const int64_t r = r0 + i, tok = r / a.group, g = r % a.group, last = a.last0 + tok;
            const int64_t first = a.window > 0 ? std::max<int64_t>(0, last - a.window + 1) : 0;
            t.q[i] = a.q + tok * a.q_token_stride + g * hd;
            t.part[i] = a.part + r * (hd + 2);
            t.lo[i] = std::max<int64_t>(first - a.k_first, 0);
            t.hi[i] = std::min(last - a.k_first, nk - 1);
        }
        switch (nr) {
            case 1: span_tile<1>(a, t, nk, n_next); break;
            case 2: span_tile<2>(a, t, nk, n_next); break;
            case 3: span_tile<3>(a, t, nk, n_next); break;
            default: span_tile<4>(a, t, nk, n_next); break;
        }
        n_next = 0;
    }
}

}  // namespace

void fill_attn_span_f16_avx2(OpKernels& ops) { ops.attn_f16_span = attn_f16_span_avx2; }

}  // namespace ei
