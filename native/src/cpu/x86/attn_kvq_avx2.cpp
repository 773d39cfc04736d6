// The span kernel of attention over a quantized cache (kernels.h, AttnKvqSpanFn) with AVX2,
// computing exactly what cpu/attn_kvq_span.h prescribes (the scalar reference is
// attn_kvq_span_ref in cpu/attn_kvq_ref.cpp; tests compare the bits). The AVX-512 table uses it
// too: an AVX-512 kernel scoring one row at a time and summing V in memory ran long contexts
// slower than this one (docs/PERFORMANCE.md).
//
// Against ggml's one-row loop (a function-pointer vec_dot and an accumulator pass through memory
// per position and per query head):
//   - the `group` query heads of a KV head are scored together, so each K and V block is loaded
//     and prepared once, not once per head; 8 K rows are scored at once, a row a lane;
//   - scores are integers: a block's dot product is VPMADDUBSW (unsigned x signed bytes, pairs
//     summed to 16 bits, saturating) then VPMADDWD with ones. It must not saturate to stay exact:
//     a q4_0 K block is its nibbles (0..15, the offset 8 taken back out with the Q block's sum),
//     a pair at most 2 * 15 * 128; a q8_0 K block is |k| against q with k's sign (ggml's trick),
//     a pair at most 2 * 127 * 127 (both sides are rounded into [-127, 127]). Either way the
//     integer sum is the exact k . q, so the bits are the reference's;
//   - the softmax is two-pass over the span, so no rescaling of the sums when the maximum moves;
//     the 16 softmax-sum lanes are two 8-lane vectors, added lane by lane first (the w = 8 step of
//     sum16_tree), and exp_poly's 2^n is built in the exponent field (x >= -87 keeps n >= -126,
//     so 2^n is a normal float and p * 2^n rounds once, like ldexp);
//   - V blocks are converted to floats in registers and summed in registers over chunks of rows.
#include <immintrin.h>

#include <algorithm>

#include "common/fp16.h"
#include "cpu/attn_kvq_span.h"
#include "cpu/prefetch_rows.h"
#include "quant/types.h"

namespace ei {

namespace {

constexpr int64_t kMaxHeads = 8;  // query heads scored together per pass over K

// How many rows ahead of the ones being read the K pass requests its rows (cpu/prefetch_rows.h);
// the V pass requests the next chunk of kRowChunk rows.
constexpr int64_t kRowsAhead = 32;

// K block b of a row, prepared once for every head of the group: dot(q) is the exact integer
// k . q + kOffset * sum(q) over the block's 32 values (q: the Q block's 32 int8).
template <uint32_t TK>
struct KBlock;
template <>
struct KBlock<TYPE_Q8_0> {
    static constexpr int32_t kOffset = 0;
    __m256i abs_k, k;
    void load(const uint8_t* row, int64_t b) {
        const block_q8_0& blk = reinterpret_cast<const block_q8_0*>(row)[b];
        k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
        abs_k = _mm256_sign_epi8(k, k);
    }
    __m256i dot(const int8_t* q) const {
        const __m256i qs = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), k);
        return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_k, qs), _mm256_set1_epi16(1));
    }
    static uint16_t d16(const uint8_t* row, int64_t b) { return reinterpret_cast<const block_q8_0*>(row)[b].d; }
};
template <>
struct KBlock<TYPE_Q4_0> {
    static constexpr int32_t kOffset = 8;
    __m256i u;
    void load(const uint8_t* row, int64_t b) {
        const block_q4_0& blk = reinterpret_cast<const block_q4_0*>(row)[b];
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
        const __m128i lo = _mm_and_si128(x, _mm_set1_epi8(15));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), _mm_set1_epi8(15));
        u = _mm256_set_m128i(hi, lo);
    }
    __m256i dot(const int8_t* q) const {
        const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u, qs), _mm256_set1_epi16(1));
    }
    static uint16_t d16(const uint8_t* row, int64_t b) { return reinterpret_cast<const block_q4_0*>(row)[b].d; }
};

// A block's F16 scale on every lane, by F16C (the portable fp16_to_fp32 is a dozen integer
// operations, which showed as much of the values pass as its multiply-adds).
inline __m256 scale8(uint16_t d) { return _mm256_cvtph_ps(_mm_set1_epi16((short)d)); }

// Half h of V block b of a row (values 16h .. 16h + 15) as two vectors of 8 floats.
template <uint32_t TV>
inline void v_half(const uint8_t* row, int64_t b, int h, __m256* v);
template <>
inline void v_half<TYPE_Q8_0>(const uint8_t* row, int64_t b, int h, __m256* v) {
    const block_q8_0& blk = reinterpret_cast<const block_q8_0*>(row)[b];
    const __m256 d = scale8(blk.d);
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs + 16 * h));
    v[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)));
    v[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(x, x))));
}
template <>
inline void v_half<TYPE_Q4_0>(const uint8_t* row, int64_t b, int h, __m256* v) {
    // Values 0..15 are the low nibbles of bytes 0..15, values 16..31 their high nibbles.
    const block_q4_0& blk = reinterpret_cast<const block_q4_0*>(row)[b];
    const __m256 d = scale8(blk.d);
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
    if (h) x = _mm_srli_epi16(x, 4);
    x = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    v[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)));
    v[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(x, x))));
}
template <>
inline void v_half<TYPE_F16>(const uint8_t* row, int64_t b, int h, __m256* v) {
    const __m128i* x = reinterpret_cast<const __m128i*>(row + (b * kSpanBlock + 16 * h) * 2);
    v[0] = _mm256_cvtph_ps(_mm_loadu_si128(x));
    v[1] = _mm256_cvtph_ps(_mm_loadu_si128(x + 1));
}

// exp_poly on 8 lanes, the same operations (lanes below -87, and -inf padding, give 0).
inline __m256 exp_poly8(__m256 x) {
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kExpC[6]);
    for (int i = 5; i >= 0; --i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[i]));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(keep, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// The 8 lane sums of v[0..8) as one vector: lane j = sum of v[j]'s 8 lanes (exact: integers).
inline __m256i hsum_8x8(const __m256i* v) {
    const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i cd = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

// sum8_tree of the 8 lanes: j + 4, then j + 2, then j + 1.
inline float sum8_tree(__m256 t) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}

// Scores of 8 K rows at once, lane = row: per block, the 8 rows' integer dots reduced together
// (hsum_8x8: lane r = row r's exact k . q), t_b = (float)isum_b * (dk_b * dq_b) as 8 lanes, and the
// chunk's tree over blocks (lanes j and j + w, w = 4, 2, 1; zeros for missing blocks) done lane by
// lane: each lane is the reference's operations for its row, in its order. A head_dim of 64 has
// two blocks a row, so reducing a row at a time left most of every horizontal step idle.
// Rows past the span (the last group of 8) read the span's last row again; their scores land in
// the padding that span_softmax overwrites.
template <uint32_t TK>
void span_scores(const AttnKvqSpan& a, const SpanScratch& sc, int64_t n, int64_t np) {
    constexpr int kRows = 8;
    const int64_t hd = a.head_dim, nb = hd / kSpanBlock;
    const __m256 scale = _mm256_set1_ps(a.scale);
    const int64_t k_bytes = (int64_t)row_bytes(TK, hd);
    request_rows(a.k, a.k_stride, a.first, 0, kRowsAhead, n, k_bytes);
    for (int64_t i0 = 0; i0 < n; i0 += kRows) {
        request_rows(a.k, a.k_stride, a.first, i0 + kRowsAhead, i0 + kRowsAhead + kRows, n, k_bytes);
        const uint8_t* kr[kRows];
        for (int r = 0; r < kRows; ++r) kr[r] = a.k + (a.first + std::min<int64_t>(i0 + r, n - 1)) * a.k_stride;
        for (int64_t g0 = 0; g0 < a.group; g0 += kMaxHeads) {
            const int64_t gn = std::min(kMaxHeads, a.group - g0);
            __m256 s[kMaxHeads];
            for (int64_t g = 0; g < gn; ++g) s[g] = _mm256_setzero_ps();
            for (int64_t c = 0; c < nb; c += kChunk) {
                const int64_t m = std::min(kChunk, nb - c);
                __m256 t[kMaxHeads][kChunk];
                for (int64_t b = 0; b < m; ++b) {
                    KBlock<TK> kb[kRows];
                    alignas(16) uint16_t dk16[kRows];
                    for (int r = 0; r < kRows; ++r) {
                        kb[r].load(kr[r], c + b);
                        dk16[r] = KBlock<TK>::d16(kr[r], c + b);
                    }
                    const __m256 dk = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dk16)));
                    for (int64_t g = 0; g < gn; ++g) {
                        const int64_t gb = (g0 + g) * sc.nbp + c + b;
                        const int8_t* q = sc.q8 + ((g0 + g) * nb + c + b) * kSpanBlock;
                        __m256i dots[kRows];
                        for (int r = 0; r < kRows; ++r) dots[r] = kb[r].dot(q);
                        const __m256i isum = _mm256_sub_epi32(
                            hsum_8x8(dots), _mm256_set1_epi32(KBlock<TK>::kOffset * sc.qsum[gb]));
                        const __m256 w = _mm256_mul_ps(dk, _mm256_set1_ps(sc.dq[gb]));
                        t[g][b] = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), w);
                    }
                }
                for (int64_t g = 0; g < gn; ++g) {
                    for (int64_t b = m; b < kChunk; ++b) t[g][b] = _mm256_setzero_ps();
                    for (int w = 4; w >= 1; w >>= 1)
                        for (int j = 0; j < w; ++j) t[g][j] = _mm256_add_ps(t[g][j], t[g][j + w]);
                    s[g] = _mm256_add_ps(s[g], t[g][0]);
                }
            }
            for (int64_t g = 0; g < gn; ++g) _mm256_storeu_ps(sc.p + (g0 + g) * np + i0, _mm256_mul_ps(s[g], scale));
        }
    }
}

void span_softmax(const AttnKvqSpan& a, const SpanScratch& sc, int64_t n, int64_t np, float* m, float* l) {
    for (int64_t g = 0; g < a.group; ++g) {
        float* p = sc.p + g * np;
        for (int64_t i = n; i < np; ++i) p[i] = -INFINITY;  // rows are padded to 16 (np): weight 0
        __m256 vmax = _mm256_set1_ps(-INFINITY);
        for (int64_t i = 0; i < np; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(p + i));
        alignas(32) float lanes8[8];
        _mm256_store_ps(lanes8, vmax);
        float mx = lanes8[0];
        for (int j = 1; j < 8; ++j) mx = std::fmax(mx, lanes8[j]);
        const __m256 vm = _mm256_set1_ps(mx);
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();  // the 16 lanes i % 16
        for (int64_t i = 0; i < np; i += 16) {
            const __m256 e0 = exp_poly8(_mm256_sub_ps(_mm256_loadu_ps(p + i), vm));
            const __m256 e1 = exp_poly8(_mm256_sub_ps(_mm256_loadu_ps(p + i + 8), vm));
            _mm256_storeu_ps(p + i, e0);
            _mm256_storeu_ps(p + i + 8, e1);
            lo = _mm256_add_ps(lo, e0);
            hi = _mm256_add_ps(hi, e1);
        }
        m[g] = mx;
        l[g] = sum8_tree(_mm256_add_ps(lo, hi));  // sum16_tree: the j + 8 step, then the 8-lane tree
    }
}

// The weighted sum of V rows, each output value's fmas in row order as the reference does them,
// with the sums in registers: 16 values of G heads at a time run over a chunk of rows (which
// stays in L1 across the chunk's passes), continuing from and returning to the sums in memory.
// Summing in memory a row at a time cost a load and a store per fma; passes over a whole span
// (thousands of rows) read it from L2 again for every 16 values.
template <uint32_t TV, int G>
void span_values_heads(const AttnKvqSpan& a, const float* p0, int64_t n, int64_t np, float* acc) {
    constexpr int64_t kRowChunk = 32;
    const int64_t hd = a.head_dim, nb = hd / kSpanBlock;
    const int64_t v_bytes = (int64_t)row_bytes(TV, hd);
    for (int64_t g = 0; g < G; ++g)
        for (int64_t j = 0; j < hd; j += 8) _mm256_storeu_ps(acc + g * hd + j, _mm256_setzero_ps());
    request_rows(a.v, a.v_stride, a.first, 0, kRowChunk, n, v_bytes);
    for (int64_t i0 = 0; i0 < n; i0 += kRowChunk) {
        const int64_t i1 = std::min(n, i0 + kRowChunk);
        request_rows(a.v, a.v_stride, a.first, i1, i1 + kRowChunk, n, v_bytes);  // the next chunk's
        for (int64_t b = 0; b < nb; ++b)
            for (int h = 0; h < 2; ++h) {
                float* out = acc + b * kSpanBlock + 16 * h;
                __m256 s[G][2];
                for (int g = 0; g < G; ++g) {
                    s[g][0] = _mm256_loadu_ps(out + g * hd);
                    s[g][1] = _mm256_loadu_ps(out + g * hd + 8);
                }
                for (int64_t i = i0; i < i1; ++i) {
                    __m256 v[2];
                    v_half<TV>(a.v + (a.first + i) * a.v_stride, b, h, v);
                    for (int g = 0; g < G; ++g) {
                        const __m256 p = _mm256_broadcast_ss(p0 + g * np + i);
                        s[g][0] = _mm256_fmadd_ps(v[0], p, s[g][0]);
                        s[g][1] = _mm256_fmadd_ps(v[1], p, s[g][1]);
                    }
                }
                for (int g = 0; g < G; ++g) {
                    _mm256_storeu_ps(out + g * hd, s[g][0]);
                    _mm256_storeu_ps(out + g * hd + 8, s[g][1]);
                }
            }
    }
}

template <uint32_t TV>
void span_values(const AttnKvqSpan& a, const SpanScratch& sc, int64_t n, int64_t np, float* acc) {
    constexpr int64_t kMaxG = 6;  // 12 sums + 2 values + 1 weight of the 16 registers
    for (int64_t g0 = 0; g0 < a.group; g0 += kMaxG) {
        const float* p0 = sc.p + g0 * np;
        float* out = acc + g0 * a.head_dim;
        switch (std::min(kMaxG, a.group - g0)) {
            case 1: span_values_heads<TV, 1>(a, p0, n, np, out); break;
            case 2: span_values_heads<TV, 2>(a, p0, n, np, out); break;
            case 3: span_values_heads<TV, 3>(a, p0, n, np, out); break;
            case 4: span_values_heads<TV, 4>(a, p0, n, np, out); break;
            case 5: span_values_heads<TV, 5>(a, p0, n, np, out); break;
            default: span_values_heads<TV, 6>(a, p0, n, np, out); break;
        }
    }
}

void attn_kvq_span_avx2(const AttnKvqSpan& a, float* acc, float* m, float* l) {
    const SpanScratch sc(a);
    const int64_t hd = a.head_dim, n = a.last - a.first + 1, np = (n + 15) & ~int64_t(15);
    for (int64_t g = 0; g < a.group; ++g)
        quantize_q_blocks(a.q + g * hd, hd, sc.nbp, sc.q8 + g * hd, sc.dq + g * sc.nbp, sc.qsum + g * sc.nbp);
    if (a.type_k == TYPE_Q8_0)
        span_scores<TYPE_Q8_0>(a, sc, n, np);
    else
        span_scores<TYPE_Q4_0>(a, sc, n, np);
    span_softmax(a, sc, n, np, m, l);
    switch (a.type_v) {
        case TYPE_Q8_0: span_values<TYPE_Q8_0>(a, sc, n, np, acc); break;
        case TYPE_Q4_0: span_values<TYPE_Q4_0>(a, sc, n, np, acc); break;
        default: span_values<TYPE_F16>(a, sc, n, np, acc); break;
    }
}

}  // namespace

void fill_attn_kvq_avx2(OpKernels& ops) { ops.attn_kvq_span = attn_kvq_span_avx2; }

}  // namespace ei
