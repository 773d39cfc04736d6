// The tiled prompt attention over an F16 cache (kernels.h, AttnF16Tile), AVX2 + FMA + F16C.
//
// Per block of kAttnTileKeys keys: K converted to F32 and transposed ([head_dim][keys]) and V
// converted ([keys][head_dim]) once for all the tile's rows; then, per row, the scores of 8 keys
// at a time are FMAs of a broadcast q element with a row of K^T (no horizontal sums), masked
// to the row's causal / window range, the block maximum merged into the running one, the
// weights exp(s - max) computed 8 at a time (ggml's AVX2 expf polynomial), and the accumulator
// (F32, in the scratch) rescaled and updated by one FMA per 8 values per key. The one-row
// kernel instead converts Q, K and V rows for every (row, key) pair, calls libm expf per key and
// rounds its accumulator to F16 per key.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "common/fp16.h"
#include "cpu/kernels.h"
#include "cpu/x86/attn_tile_avx2.h"
#include "cpu/x86/expf_avx2.h"

namespace ei {
namespace {

constexpr int kVecs = (int)(KB / 8);  // score vectors a block

// o = o * al + sum_{j_lo <= j <= j_hi} p[j] v_j over NV registers of 8 values (v_j at vb + j * hd).
template <int NV>
inline void accumulate_v(float* o_mem, const float* vb, int64_t hd, const float* p, int64_t j_lo, int64_t j_hi,
                         __m256 al) {
    __m256 o[NV];
    for (int i = 0; i < NV; ++i) o[i] = _mm256_mul_ps(_mm256_loadu_ps(o_mem + 8 * i), al);
    for (int64_t j = j_lo; j <= j_hi; ++j) {
        const __m256 pj = _mm256_set1_ps(p[j]);
        const float* vj = vb + j * hd;
        for (int i = 0; i < NV; ++i) o[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), o[i]);
    }
    for (int i = 0; i < NV; ++i) _mm256_storeu_ps(o_mem + 8 * i, o[i]);
}

// The same for the last nv < 8 registers of a head size that is not a multiple of 64.
inline void accumulate_v_tail(float* o_mem, const float* vb, int64_t hd, const float* p, int64_t j_lo, int64_t j_hi,
                              __m256 al, int nv) {
    for (int i = 0; i < nv; ++i) accumulate_v<1>(o_mem + 8 * i, vb + 8 * i, hd, p, j_lo, j_hi, al);
}

void attn_f16_tile_avx2(const AttnF16Tile& a) {
    const int64_t hd = a.head_dim, rows = a.n_tok * a.group;
    const TileScratch sc(a);
    float *const kT = sc.kT, *const vb = sc.vb, *const acc = sc.acc, *const row_max = sc.row_max,
                 *const row_sum = sc.row_sum;
    float* const p = sc.p;
    auto first_of = [&](int64_t last) { return a.window > 0 ? std::max<int64_t>(0, last - a.window + 1) : 0; };
    const int64_t last_max = a.last0 + a.n_tok - 1;
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 scale = _mm256_set1_ps(a.scale);

    for (int64_t kb0 = first_of(a.last0); kb0 <= last_max; kb0 += KB) {
        const int64_t nk = std::min(KB, last_max - kb0 + 1);
        load_block(a, kb0, nk, kT, vb);
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t t = r / a.group, g = r % a.group, last = a.last0 + t;
            const int64_t j_lo = std::max<int64_t>(first_of(last) - kb0, 0), j_hi = std::min(last - kb0, nk - 1);
            if (j_lo > j_hi) continue;
            // Scores of the block's keys: s[v] lanes = keys 8v..8v+7.
            const float* q = a.q + t * a.q_token_stride + g * hd;
            __m256 s[kVecs];
            for (int v = 0; v < kVecs; ++v) s[v] = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; ++d) {
                const __m256 qd = _mm256_set1_ps(q[d]);
                const float* kd = kT + d * KB;
                for (int v = 0; v < kVecs; ++v) s[v] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kd + 8 * v), s[v]);
            }
            const __m256 lo = _mm256_set1_ps((float)j_lo), hi = _mm256_set1_ps((float)j_hi);
            __m256 valid[kVecs];
            __m256 mx = _mm256_set1_ps(-INFINITY);
            for (int v = 0; v < kVecs; ++v) {
                const __m256 idx = _mm256_add_ps(lane, _mm256_set1_ps((float)(8 * v)));
                valid[v] = _mm256_and_ps(_mm256_cmp_ps(idx, lo, _CMP_GE_OQ), _mm256_cmp_ps(idx, hi, _CMP_LE_OQ));
                s[v] = _mm256_mul_ps(s[v], scale);
                mx = _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s[v], valid[v]));
            }
            const float m_old = row_max[r], m_new = std::max(m_old, hmax8(mx));
            const __m256 mv = _mm256_set1_ps(m_new);
            __m256 sum = _mm256_setzero_ps();
            for (int v = 0; v < kVecs; ++v) {
                // Masked lanes take exp(0) and are zeroed afterwards (no infinities through expf8).
                const __m256 x = _mm256_and_ps(_mm256_sub_ps(s[v], mv), valid[v]);
                const __m256 w = _mm256_and_ps(expf8(x), valid[v]);
                _mm256_storeu_ps(p + 8 * v, w);
                sum = _mm256_add_ps(sum, w);
            }
            const float alpha = m_old == -INFINITY ? 0.0f : std::exp(m_old - m_new);
            row_sum[r] = row_sum[r] * alpha + hsum8(sum);
            row_max[r] = m_new;
            // acc = acc * alpha + sum_j p[j] v_j, 64 values (8 registers) at a time.
            float* ar = acc + r * hd;
            const __m256 al = _mm256_set1_ps(alpha);
            for (int64_t d0 = 0; d0 < hd; d0 += 64) {
                if (hd - d0 >= 64)  // a constant count keeps the 8 sums in registers
                    accumulate_v<8>(ar + d0, vb + d0, hd, p, j_lo, j_hi, al);
                else
                    accumulate_v_tail(ar + d0, vb + d0, hd, p, j_lo, j_hi, al, (int)((hd - d0) / 8));
            }
        }
    }
    finish_tile(a, sc);
}

}  // namespace

void fill_attn_prefill_avx2(OpKernels& ops) { ops.attn_f16_tile = attn_f16_tile_avx2; }

}  // namespace ei
