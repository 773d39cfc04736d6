// Scalar reference of attention over a quantized KV cache: ggml's f32 vector ops built without
// SIMD (no FMA contraction: this unit is compiled for the baseline target in ISO C++).
#include "cpu/attn_kvq.h"

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
                      float* scratch, float* out) {
    attend_row_kvq<ScalarF32Prims>(q, k, v, k_stride, v_stride, first, last, head_dim, scale, t, scratch, out);
}

}  // namespace

void fill_attn_kvq_scalar(OpKernels& ops) { ops.attn_kvq_row = attn_kvq_row_ref; }

}  // namespace ei
