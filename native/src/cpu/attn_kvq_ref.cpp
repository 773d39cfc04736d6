// Scalar reference of attention over a quantized KV cache: ggml's f32 vector ops built without
// SIMD (no FMA contraction: this unit is compiled for the baseline target in ISO C++).
#include <algorithm>

#include "cpu/attn_kvq.h"
#include "cpu/attn_kvq_span.h"

namespace ei {

namespace {

struct ScalarF32Prims {
    static void scale(int64_t n, float* y, float v) {
        for (int64_t i = 0; i < n; ++i) y[i] *= v;
    }
    static void mad(int64_t n, float* y, const float* x, float v) {
        for (int64_t i = 0; i < n; ++i) y[i] += x[i] * v;
    }
    static void mad_q8_0(int64_t n, float* y, const block_q8_0* x, float v) {
        for (int64_t b = 0; b < n / QK8_0; ++b) {
            const float d = fp16_to_fp32(x[b].d);
            for (int j = 0; j < QK8_0; ++j) y[b * QK8_0 + j] += ((float)x[b].qs[j] * d) * v;
        }
    }
    static float sum_update(float S, float ms, float vs) { return S * ms + vs; }
};

void attn_kvq_row_ref(const float* q, const uint8_t* k, const uint8_t* v, size_t k_stride, size_t v_stride,
                      int64_t first, int64_t last, int64_t head_dim, float scale, const AttnKvTypes& t,
                      float* scratch, float* out, float* ms) {
    attend_row_kvq<ScalarF32Prims>(q, k, v, k_stride, v_stride, first, last, head_dim, scale, t, scratch, out, ms);
}

// K block b of a row: the integer dot product with 32 quantized Q values, and its scale.
int32_t k_block_isum(uint32_t type_k, const uint8_t* row, int64_t b, const int8_t* q) {
    int32_t sum = 0;
    if (type_k == TYPE_Q8_0) {
        const block_q8_0& blk = reinterpret_cast<const block_q8_0*>(row)[b];
        for (int j = 0; j < QK8_0; ++j) sum += blk.qs[j] * q[j];
    } else {
        const block_q4_0& blk = reinterpret_cast<const block_q4_0*>(row)[b];
        for (int j = 0; j < QK4_0 / 2; ++j)
            sum += ((blk.qs[j] & 15) - 8) * q[j] + ((blk.qs[j] >> 4) - 8) * q[j + QK4_0 / 2];
    }
    return sum;
}

float k_block_d(uint32_t type_k, const uint8_t* row, int64_t b) {
    return fp16_to_fp32(type_k == TYPE_Q8_0 ? reinterpret_cast<const block_q8_0*>(row)[b].d
                                            : reinterpret_cast<const block_q4_0*>(row)[b].d);
}

void v_block_to_float(uint32_t type_v, const uint8_t* row, int64_t b, float* out) {
    if (type_v == TYPE_Q8_0) {
        const block_q8_0& blk = reinterpret_cast<const block_q8_0*>(row)[b];
        const float d = fp16_to_fp32(blk.d);
        for (int j = 0; j < QK8_0; ++j) out[j] = d * (float)blk.qs[j];
    } else if (type_v == TYPE_Q4_0) {
        const block_q4_0& blk = reinterpret_cast<const block_q4_0*>(row)[b];
        const float d = fp16_to_fp32(blk.d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            out[j] = d * (float)((blk.qs[j] & 15) - 8);
            out[j + QK4_0 / 2] = d * (float)((blk.qs[j] >> 4) - 8);
        }
    } else {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(row) + b * kSpanBlock;
        for (int j = 0; j < kSpanBlock; ++j) out[j] = fp16_to_fp32(h[j]);
    }
}

// The reference of AttnKvqSpanFn, operation for operation what cpu/attn_kvq_span.h prescribes.
void attn_kvq_span_ref(const AttnKvqSpan& a, float* acc, float* m, float* l) {
    const SpanScratch sc(a);
    const int64_t hd = a.head_dim, nb = hd / kSpanBlock, n = a.last - a.first + 1, np = (n + 15) & ~int64_t(15);
    for (int64_t g = 0; g < a.group; ++g)
        quantize_q_blocks(a.q + g * hd, hd, sc.nbp, sc.q8 + g * hd, sc.dq + g * sc.nbp, sc.qsum + g * sc.nbp);
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* kr = a.k + (a.first + i) * a.k_stride;
        for (int64_t g = 0; g < a.group; ++g) {
            float s = 0.0f;
            for (int64_t c = 0; c < nb; c += kChunk) {
                float t[kChunk] = {};
                for (int64_t b = c; b < std::min(nb, c + kChunk); ++b) {
                    const int32_t isum = k_block_isum(a.type_k, kr, b, sc.q8 + g * hd + b * kSpanBlock);
                    t[b - c] = (float)isum * (k_block_d(a.type_k, kr, b) * sc.dq[g * sc.nbp + b]);
                }
                s += sum8_tree(t);
            }
            sc.p[g * np + i] = s * a.scale;
        }
    }
    for (int64_t g = 0; g < a.group; ++g) {
        float* p = sc.p + g * np;
        float mx = -INFINITY;
        for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, p[i]);
        float lanes[16] = {};
        for (int64_t i = 0; i < n; ++i) {
            p[i] = exp_poly(p[i] - mx);
            lanes[i % 16] += p[i];
        }
        m[g] = mx;
        l[g] = sum16_tree(lanes);
    }
    for (int64_t j = 0; j < a.group * hd; ++j) acc[j] = 0.0f;
    float vb[kSpanBlock];
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* vr = a.v + (a.first + i) * a.v_stride;
        for (int64_t b = 0; b < nb; ++b) {
            v_block_to_float(a.type_v, vr, b, vb);
            for (int64_t g = 0; g < a.group; ++g) {
                const float p = sc.p[g * np + i];
                float* ab = acc + g * hd + b * kSpanBlock;
                for (int j = 0; j < kSpanBlock; ++j) ab[j] = std::fma(vb[j], p, ab[j]);
            }
        }
    }
}

}  // namespace

void fill_attn_kvq_scalar(OpKernels& ops) {
    ops.attn_kvq_row = attn_kvq_row_ref;
    ops.attn_kvq_span = attn_kvq_span_ref;
}

}  // namespace ei
