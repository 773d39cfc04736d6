// The span kernel of attention over a quantized cache (kernels.h, AttnKvqSpanFn) with AVX-512 and
// VNNI, computing exactly what cpu/attn_kvq_span.h prescribes (the scalar reference is
// attn_kvq_span_ref in cpu/attn_kvq_ref.cpp; tests compare the bits).
//
// Why it is faster than the row kernel (ggml's one-row loop: a function-pointer vec_dot and an
// accumulator pass through memory per position and per query head):
//   - the `group` query heads of a KV head are done together, so each K and V block is loaded
//     and converted once, not once per head;
//   - a score is one VPDPBUSD per 32 values: K's bytes are made unsigned (q8_0: k + 128 by an
//     XOR; q4_0: the nibbles as they are) and the offset is taken back out with the Q block's sum;
//     8 blocks' integer sums are reduced together and scaled as one vector;
//   - the softmax is two-pass over the span with a 16-lane exp, so no rescaling of the
//     accumulator when the maximum moves;
//   - V blocks are converted to floats in registers and FMA'd into the accumulators.
#include <immintrin.h>

// GCC 12's unmasked AVX-512 intrinsics pass _mm512_undefined_ps() as the merge source, which
// -Wmaybe-uninitialized reports as a use of an uninitialized value: a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>

#include "common/fp16.h"
#include "cpu/attn_kvq_span.h"
#include "cpu/prefetch_rows.h"
#include "quant/types.h"

namespace ei {

namespace {

constexpr int64_t kMaxHeads = 8;  // query heads scored together per pass over K
// How many rows ahead of the one being read the K and V passes request theirs
// (cpu/prefetch_rows.h; the AVX2 kernel's distance, measured there, not on AVX-512).
constexpr int64_t kRowsAhead = 32;

inline int32_t hsum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// K block b of a row as 32 unsigned bytes u, with u . q = (k . q) + kOffset * sum(q).
template <uint32_t TK>
struct KBlock;
template <>
struct KBlock<TYPE_Q8_0> {
    static constexpr int32_t kOffset = 128;
    static __m256i bytes(const uint8_t* row, int64_t b) {
        const block_q8_0& blk = reinterpret_cast<const block_q8_0*>(row)[b];
        return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs)),
                                _mm256_set1_epi8((char)0x80));
    }
    static uint16_t d16(const uint8_t* row, int64_t b) { return reinterpret_cast<const block_q8_0*>(row)[b].d; }
};
template <>
struct KBlock<TYPE_Q4_0> {
    static constexpr int32_t kOffset = 8;
    static __m256i bytes(const uint8_t* row, int64_t b) {
        const block_q4_0& blk = reinterpret_cast<const block_q4_0*>(row)[b];
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
        const __m128i lo = _mm_and_si128(x, _mm_set1_epi8(15));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), _mm_set1_epi8(15));
        return _mm256_set_m128i(hi, lo);
    }
    static uint16_t d16(const uint8_t* row, int64_t b) { return reinterpret_cast<const block_q4_0*>(row)[b].d; }
};

// V block b of a row as two vectors of 16 floats (values 0..15 and 16..31).
template <uint32_t TV>
inline void v_block(const uint8_t* row, int64_t b, __m512& v0, __m512& v1);
template <>
inline void v_block<TYPE_Q8_0>(const uint8_t* row, int64_t b, __m512& v0, __m512& v1) {
    const block_q8_0& blk = reinterpret_cast<const block_q8_0*>(row)[b];
    const __m512 d = _mm512_set1_ps(fp16_to_fp32(blk.d));
    const __m128i* qs = reinterpret_cast<const __m128i*>(blk.qs);
    v0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs))));
    v1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs + 1))));
}
template <>
inline void v_block<TYPE_Q4_0>(const uint8_t* row, int64_t b, __m512& v0, __m512& v1) {
    const block_q4_0& blk = reinterpret_cast<const block_q4_0*>(row)[b];
    const __m512 d = _mm512_set1_ps(fp16_to_fp32(blk.d));
    const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)));
    const __m512i eight = _mm512_set1_epi32(8), fifteen = _mm512_set1_epi32(15);
    v0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(x, fifteen), eight)));
    v1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(x, 4), eight)));
}
template <>
inline void v_block<TYPE_F16>(const uint8_t* row, int64_t b, __m512& v0, __m512& v1) {
    const __m256i* h = reinterpret_cast<const __m256i*>(row + b * kSpanBlock * 2);
    v0 = _mm512_cvtph_ps(_mm256_loadu_si256(h));
    v1 = _mm512_cvtph_ps(_mm256_loadu_si256(h + 1));
}

// exp_poly on 16 lanes, the same operations.
inline __m512 exp_poly16(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kExpC[6]);
    for (int i = 5; i >= 0; --i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[i]));
    return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n));
}

// The 8 lane sums of v[0..8) as one vector: lane j = sum of v[j]'s 8 lanes (exact: integers).
inline __m256i hsum_8x8(const __m256i* v) {
    const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i cd = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

// The 4 lane sums of v[0..4) (exact: integers).
inline __m128i hsum_4x8(const __m256i* v) {
    const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(ab), _mm256_extracti128_si256(ab, 1));
}

// sum8_tree of 8 lanes whose last 4 are 0: the j + 4 step adds zeros, then j + 2, then j + 1.
inline float sum4_tree(__m128 x) {
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}

// sum8_tree of the 8 lanes: j + 4, then j + 2, then j + 1.
inline float sum8_tree(__m256 t) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}

template <uint32_t TK>
void span_scores(const AttnKvqSpan& a, const SpanScratch& sc, int64_t n, int64_t np) {
    const int64_t hd = a.head_dim, nb = hd / kSpanBlock;
    const __m256i off = _mm256_set1_epi32(KBlock<TK>::kOffset);
    __m256i u[kChunk], dots[kChunk];
    alignas(16) uint16_t dk16[kChunk];
    const int64_t k_bytes = (int64_t)row_bytes(TK, hd);
    request_rows(a.k, a.k_stride, a.first, 0, kRowsAhead, n, k_bytes);
    for (int64_t i = 0; i < n; ++i) {
        request_rows(a.k, a.k_stride, a.first, i + kRowsAhead, i + kRowsAhead + 1, n, k_bytes);
        const uint8_t* kr = a.k + (a.first + i) * a.k_stride;
        float s[kMaxHeads];
        for (int64_t g0 = 0; g0 < a.group; g0 += kMaxHeads) {
            const int64_t gn = std::min(kMaxHeads, a.group - g0);
            for (int64_t g = 0; g < gn; ++g) s[g] = 0.0f;
            for (int64_t c = 0; c < nb; c += kChunk) {
                const int64_t m = std::min(kChunk, nb - c);
                for (int64_t b = 0; b < kChunk; ++b) {
                    u[b] = b < m ? KBlock<TK>::bytes(kr, c + b) : _mm256_setzero_si256();
                    dk16[b] = b < m ? KBlock<TK>::d16(kr, c + b) : 0;
                }
                const __m256 dk = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dk16)));
                for (int64_t g = 0; g < gn; ++g) {
                    const int64_t gb = (g0 + g) * sc.nbp + c;
                    const int8_t* q = sc.q8 + ((g0 + g) * nb + c) * kSpanBlock;
                    for (int64_t b = 0; b < (m <= 4 ? 4 : kChunk); ++b)
                        dots[b] = b < m ? _mm256_dpbusd_epi32(_mm256_setzero_si256(), u[b],
                                                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                                                  q + b * kSpanBlock)))
                                        : _mm256_setzero_si256();
                    if (m <= 4) {  // head_dim <= 128: half the reduction
                        const __m128i qsum = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc.qsum + gb));
                        const __m128i isum =
                            _mm_sub_epi32(hsum_4x8(dots), _mm_mullo_epi32(_mm256_castsi256_si128(off), qsum));
                        const __m128 w = _mm_mul_ps(_mm256_castps256_ps128(dk), _mm_loadu_ps(sc.dq + gb));
                        s[g] += sum4_tree(_mm_mul_ps(_mm_cvtepi32_ps(isum), w));
                        continue;
                    }
                    const __m256i qsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc.qsum + gb));
                    const __m256i isum = _mm256_sub_epi32(hsum_8x8(dots), _mm256_mullo_epi32(off, qsum));
                    const __m256 w = _mm256_mul_ps(dk, _mm256_loadu_ps(sc.dq + gb));
                    s[g] += sum8_tree(_mm256_mul_ps(_mm256_cvtepi32_ps(isum), w));
                }
            }
            for (int64_t g = 0; g < gn; ++g) sc.p[(g0 + g) * np + i] = s[g] * a.scale;
        }
    }
}

void span_softmax(const AttnKvqSpan& a, const SpanScratch& sc, int64_t n, int64_t np, float* m, float* l) {
    for (int64_t g = 0; g < a.group; ++g) {
        float* p = sc.p + g * np;
        __m512 vmax = _mm512_set1_ps(-INFINITY);
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, p + i));
        }
        const float mx = _mm512_reduce_max_ps(vmax);
        const __m512 vm = _mm512_set1_ps(mx);
        __m512 lanes = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            const __m512 e = exp_poly16(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, p + i), vm));
            _mm512_storeu_ps(p + i, e);  // rows are padded to 16 (np)
            lanes = _mm512_add_ps(lanes, e);
        }
        alignas(64) float part[16];
        _mm512_store_ps(part, lanes);
        m[g] = mx;
        l[g] = sum16_tree(part);
    }
}

template <uint32_t TV>
void span_values(const AttnKvqSpan& a, const SpanScratch& sc, int64_t n, int64_t np, float* acc) {
    const int64_t hd = a.head_dim, nb = hd / kSpanBlock;
    for (int64_t j = 0; j < a.group * hd; j += 16) _mm512_storeu_ps(acc + j, _mm512_setzero_ps());
    const int64_t v_bytes = (int64_t)row_bytes(TV, hd);
    request_rows(a.v, a.v_stride, a.first, 0, kRowsAhead, n, v_bytes);
    for (int64_t i = 0; i < n; ++i) {
        request_rows(a.v, a.v_stride, a.first, i + kRowsAhead, i + kRowsAhead + 1, n, v_bytes);
        const uint8_t* vr = a.v + (a.first + i) * a.v_stride;
        for (int64_t b = 0; b < nb; ++b) {
            __m512 v0, v1;
            v_block<TV>(vr, b, v0, v1);
            for (int64_t g = 0; g < a.group; ++g) {
                const __m512 p = _mm512_set1_ps(sc.p[g * np + i]);
                float* ab = acc + g * hd + b * kSpanBlock;
                _mm512_storeu_ps(ab, _mm512_fmadd_ps(v0, p, _mm512_loadu_ps(ab)));
                _mm512_storeu_ps(ab + 16, _mm512_fmadd_ps(v1, p, _mm512_loadu_ps(ab + 16)));
            }
        }
    }
}

void attn_kvq_span_avx512(const AttnKvqSpan& a, float* acc, float* m, float* l) {
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

void fill_attn_kvq_avx512(OpKernels& ops) { ops.attn_kvq_span = attn_kvq_span_avx512; }

}  // namespace ei
