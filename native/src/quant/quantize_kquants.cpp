// Quantizers of the k-quants: a super-block of 256 floats is cut into sub-blocks of 16 (q2_K,
// q3_K, q6_K) or 32 (q4_K, q5_K); each sub-block gets its own scale (and min) by a small search,
// then the scales themselves are quantized to 4, 6 or 8 bits against one fp16 super-block scale,
// and finally every element is re-quantized with the scale it will actually be decoded with.
// Two of each: ggml's reference (quantize_row_q*_K_ref, llama-quantize without an importance
// matrix) and its imatrix path (quantize_row_q*_K_impl); they share the final re-quantization
// and packing, and differ in the searches and in how the sub-block scales are quantized.
//
// The searches without an imatrix (as ggml defines them):
//   make_qx_quants (q6_K): symmetric, scale = -nmax / (signed absmax); try 19 nearby scales and
//       keep the one maximising (sum w x l)^2 / (sum w l^2), weights w = x^2 — the least-squares
//       optimal scale for those quants.
//   make_q3_quants (q3_K): symmetric, then up to 5 passes of coordinate descent that move single
//       quants while the weighted least-squares fit improves.
//   make_qkx2_quants (q2_K, q4_K, q5_K): affine (scale and min <= 0), try nstep+1 scales around
//       nmax / (max - min), fit scale and min by weighted least squares for each, keep the one
//       with the smallest weighted error (absolute for q2_K, squared otherwise).
// With an imatrix qw, the weights are qw * sqrt(sigma2 + x^2) (sigma2 the super-block's mean
// square, doubled for q3_K..q5_K; q6_K takes qw as they are), q3_K uses make_qx_quants, the
// affine types make_qkx3_quants (37 scales, squared error), and the sub-block scales are
// quantized by a weighted search too (make_qx_quants for q3_K, make_qp_quants for q2_K, q4_K,
// q5_K) instead of against their maximum. The shared searches are in quantize_math.cpp.
//
// Every float operation is written in ggml's order (no fused multiply-adds: this unit is built
// for the baseline target), because the chosen quants depend on exact comparisons.
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/quantize_math.h"

namespace ei {
namespace qref {

namespace {

// Symmetric search refined by coordinate descent (ggml's make_q3_quants with do_rmse).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Affine search (ggml's make_qkx2_quants): L[i] in [0, nmax], x ~ scale * L - *the_min. Its
// imatrix sibling make_qkx3_quants (quantize_math.cpp) clips iscale * (x - min) before rounding
// where this rounds whatever it gets; kept apart so that both give their own ggml's bytes.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = (uint8_t)clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? std::fabs(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

// The 6-bit scale and min of sub-block j of a q4_K / q5_K scales array.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

// Stores 6-bit scale ls and min lm of sub-block j: j < 4 in bytes j and j + 4, j >= 4 split
// into a nibble each in byte j + 4 and their top 2 bits in bits 6-7 of bytes j - 4 and j.
inline void set_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* q) {
    if (j < 4) {
        q[j] = ls;
        q[j + 4] = lm;
    } else {
        q[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
        q[j - 4] |= (uint8_t)((ls >> 4) << 6);
        q[j - 0] |= (uint8_t)((lm >> 4) << 6);
    }
}

// Stores 6-bit scale l of sub-block j of q3_K (scales zeroed before): low nibbles in bytes 0..7
// (j < 8 low half, j >= 8 high half), the 2 high bits at bits 2*(j/4) of byte 8 + j%4.
inline void set_scale_q3_K(int j, int l, uint8_t* scales) {
    if (j < 8) scales[j] = (uint8_t)(l & 0xF);
    else scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
    l >>= 4;
    scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
}

// 2-bit quants of 4 x 32 elements per 32 bytes: byte l of a 128-element half holds elements
// l, l + 32, l + 64, l + 96 (lowest bits first). Used by q2_K and q3_K.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// The tails every k-quant shares between its reference and imatrix quantizers: once the scales
// are stored, each element is re-quantized with the scale (and min) it will be decoded with —
// a sub-block whose decoded scale is 0 keeps the search's quants — and packed.

// q2_K: L[256] in 0..3.
void finish_q2_K(const float* x, uint8_t* L, block_q2_K& y) {
    const float dm = fp16_to_fp32(y.d), mm = fp16_to_fp32(y.dmin);
    for (int j = 0; j < QK_K / 16; ++j) {
        const float d = dm * (y.scales[j] & 0xF);
        if (!d) continue;
        const float m = mm * (y.scales[j] >> 4);
        for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (uint8_t)clamp(nearest_int((x[16 * j + ii] + m) / d), 0, 3);
    }
    pack_2bit(L, y.qs);
}

// q3_K: L[256] in 0..7; the high bit of element j goes to bit j / 32 of hmask[j % 32].
void finish_q3_K(const float* x, int8_t* L, block_q3_K& y) {
    for (int j = 0; j < QK_K / 16; ++j) {
        int8_t sc = (int8_t)(j < 8 ? y.scales[j] & 0xF : y.scales[j - 8] >> 4);
        sc = (int8_t)((sc | (((y.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
        const float d = fp16_to_fp32(y.d) * sc;
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(clamp(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
    }
    std::memset(y.hmask, 0, QK_K / 8);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < QK_K; ++j) {
        if (L[j] > 3) {
            y.hmask[m] |= hm;
            L[j] -= 4;
        }
        if (++m == QK_K / 8) {
            m = 0;
            hm <<= 1;
        }
    }
    pack_2bit((const uint8_t*)L, y.qs);
}

// q4_K / q5_K: L[256] in 0..nmax (packed by the caller).
template <typename Block>
void requantize_k4(const float* x, int nmax, const Block& y, uint8_t* L) {
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        get_scale_min_k4(j, y.scales, &sc, &m);
        const float d = fp16_to_fp32(y.d) * sc;
        if (!d) continue;
        const float dm = fp16_to_fp32(y.dmin) * m;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)clamp(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

// Nibbles: 32 bytes per 64 elements, element l low and l + 32 high.
void pack_q4_K(const uint8_t* L, block_q4_K& y) {
    uint8_t* q = y.qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

// Low nibbles as q4_K; the fifth bit of elements n + j and n + j + 32 (n = 0, 64, ...) goes to
// qh[j] at bits 2(n/64) and 2(n/64) + 1.
void pack_q5_K(const uint8_t* L, block_q5_K& y) {
    uint8_t* qh = y.qh;
    uint8_t* ql = y.qs;
    std::memset(qh, 0, QK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int nn = 0; nn < QK_K; nn += 64, ql += 32) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[nn + j];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            int l2 = L[nn + j + 32];
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = (uint8_t)(l1 | (l2 << 4));
        }
        m1 <<= 2;
        m2 <<= 2;
    }
}

// The sub-block scales and mins of q4_K / q5_K without an imatrix (8 sub-blocks of 32, weights
// av|x| + |x|): searches each sub-block, stores 6-bit scales/mins against d = max / 63, then
// re-quantizes every element with its decoded scale into L[256] (values 0..nmax).
template <typename Block>
void quantize_k4_like(const float* x, Block& y, int nmax, float rmin, int nstep, uint8_t* L) {
    float mins[QK_K / 32], scales[QK_K / 32], weights[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep,
                                     false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        const uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        const uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        set_scale_min_k4(j, ls < 63 ? ls : 63, lm < 63 ? lm : 63, y.scales);
    }
    y.d = fp32_to_fp16(max_scale / 63.f);
    y.dmin = fp32_to_fp16(max_min / 63.f);
    requantize_k4(x, nmax, y, L);
}

// The same with an imatrix (ggml's quantize_row_q{4,5}_K_impl): weights from the importance
// matrix slice qw[256], the affine search with them, and the scales and mins quantized by
// make_qp_quants weighted by each sub-block's total weight. ggml caps q5_K's 6-bit values at
// 63 and leaves q4_K's as make_qp_quants gives them (`cap`).
template <typename Block>
void quantize_k4_like_imatrix(const float* x, const float* qw, Block& y, int nmax, bool cap, uint8_t* L) {
    float mins[QK_K / 32], scales[QK_K / 32], sw[QK_K / 32], weights[32];
    uint8_t Laux[32], Ls[QK_K / 32], Lm[QK_K / 32];
    const float sigma2 = 2 * sum_of_squares(x, QK_K) / QK_K;
    for (int j = 0; j < QK_K / 32; ++j) {
        importance_weights(32, x + 32 * j, qw + 32 * j, sigma2, weights);
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux);
    }
    const float d_block = make_qp_quants(QK_K / 32, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(QK_K / 32, 63, mins, Lm, sw);
    for (int j = 0; j < QK_K / 32; ++j) {
        const uint8_t ls = cap && Ls[j] > 63 ? 63 : Ls[j];
        const uint8_t lm = cap && Lm[j] > 63 ? 63 : Lm[j];
        set_scale_min_k4(j, ls, lm, y.scales);
    }
    y.d = fp32_to_fp16(d_block);
    y.dmin = fp32_to_fp16(m_block);
    requantize_k4(x, nmax, y, L);
}

// One q6_K super-block, with importance weights qw[256] or (null) x^2: symmetric search per
// sub-block of 16, 8-bit sub-block scales against d = max / -128, re-quantization, packing.
void quantize_q6_K_block(const float* x, const float* qw, block_q6_K& y) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : nullptr);
        scales[ib] = scale;
        if (std::fabs(scale) > max_abs_scale) {
            max_abs_scale = std::fabs(scale);
            max_scale = scale;
        }
    }
    if (max_abs_scale < kGroupMaxEps) {
        std::memset(&y, 0, sizeof(block_q6_K));
        return;
    }
    const float iscale = -128.f / max_scale;
    y.d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        const int l = nearest_int(iscale * scales[ib]);
        y.scales[ib] = (int8_t)(l < 127 ? l : 127);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
        const float d = fp16_to_fp32(y.d) * y.scales[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(clamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
    // 4 low bits: ql[l] = elements l | l + 64 << 4, ql[l + 32] = l + 32 | l + 96 << 4;
    // 2 high bits of l, l + 32, l + 64, l + 96 in qh[l] (per 128 elements).
    uint8_t* ql = y.ql;
    uint8_t* qh = y.qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
            const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
            ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
            ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                              ((L[j + l + 96] >> 4) << 6));
        }
    }
}

}  // namespace

void quantize_row_q2_K(const float* x, void* vy, int64_t n) {
    block_q2_K* y = (block_q2_K*)vy;
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K], Laux[16];
        float weights[16], mins[QK_K / 16], scales[QK_K / 16];
        float max_scale = 0, max_min = 0;  // mins are subtracted, so scales are positive
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
            y[i].d = fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = fp32_to_fp16(0.f);
        }
        finish_q2_K(x, L, y[i]);
    }
}

void quantize_row_q2_K_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q2_K* y = (block_q2_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float* qw = imatrix + QK_K * i;
        uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
        float weights[16], sw[QK_K / 16], mins[QK_K / 16], scales[QK_K / 16];
        const float sigma2 = sum_of_squares(x, QK_K) / QK_K;
        for (int j = 0; j < QK_K / 16; ++j) {
            importance_weights(16, x + 16 * j, qw + 16 * j, sigma2, weights);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weights[l];
            sw[j] = sumw;
            scales[j] = make_qkx3_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux);
        }
        y[i].d = fp32_to_fp16(make_qp_quants(QK_K / 16, 15, scales, Ls, sw));
        y[i].dmin = fp32_to_fp16(make_qp_quants(QK_K / 16, 15, mins, Lm, sw));
        for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        finish_q2_K(x, L, y[i]);
    }
}

void quantize_row_q3_K(const float* x, void* vy, int64_t n) {
    block_q3_K* y = (block_q3_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        int8_t L[QK_K];
        float scales[QK_K / 16];
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = std::fabs(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        std::memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                const int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                set_scale_q3_K(j, clamp(l, -32, 31) + 32, y[i].scales);
            }
            y[i].d = fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = fp32_to_fp16(0.f);
        }
        finish_q3_K(x, L, y[i]);
    }
}

void quantize_row_q3_K_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q3_K* y = (block_q3_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float* qw = imatrix + QK_K * i;
        int8_t L[QK_K], Ls[QK_K / 16];
        float weights[16], sw[QK_K / 16], scales[QK_K / 16];
        const float sigma2 = 2 * sum_of_squares(x, QK_K) / QK_K;
        for (int j = 0; j < QK_K / 16; ++j) {
            importance_weights(16, x + 16 * j, qw + 16 * j, sigma2, weights);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weights[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weights);
        }
        // The 16 sub-block scales quantized to 6 bits by the same symmetric search, weighted by
        // each sub-block's total weight.
        std::memset(y[i].scales, 0, 12);
        const float d_block = make_qx_quants(QK_K / 16, 32, scales, Ls, sw);
        for (int j = 0; j < QK_K / 16; ++j) set_scale_q3_K(j, Ls[j], y[i].scales);
        y[i].d = fp32_to_fp16(d_block);
        finish_q3_K(x, L, y[i]);
    }
}

void quantize_row_q4_K(const float* x, void* vy, int64_t n) {
    block_q4_K* y = (block_q4_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_like(x, y[i], 15, -1.f, 20, L);
        pack_q4_K(L, y[i]);
    }
}

void quantize_row_q4_K_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q4_K* y = (block_q4_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_like_imatrix(x, imatrix + QK_K * i, y[i], 15, false, L);
        pack_q4_K(L, y[i]);
    }
}

void quantize_row_q5_K(const float* x, void* vy, int64_t n) {
    block_q5_K* y = (block_q5_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_like(x, y[i], 31, -0.5f, 15, L);
        pack_q5_K(L, y[i]);
    }
}

void quantize_row_q5_K_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q5_K* y = (block_q5_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        quantize_k4_like_imatrix(x, imatrix + QK_K * i, y[i], 31, true, L);
        pack_q5_K(L, y[i]);
    }
}

void quantize_row_q6_K(const float* x, void* vy, int64_t n) {
    block_q6_K* y = (block_q6_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++) quantize_q6_K_block(x + QK_K * i, nullptr, y[i]);
}

// ggml's impl passes the imatrix slice itself as make_qx_quants' weights (the sigma2 form is
// commented out there).
void quantize_row_q6_K_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_q6_K* y = (block_q6_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++) quantize_q6_K_block(x + QK_K * i, imatrix + QK_K * i, y[i]);
}

}  // namespace qref
}  // namespace ei
