// Attention over a quantized KV cache for x86 builds with FMA (the AVX2 and AVX-512 tables).
// ggml_vec_mad_f32 is one FMA per element whatever the vector width (GGML_F32_VEC_FMA, and the
// contracted scalar tail), and ggml_vec_scale_f32 one multiply, so a plain FMA loop (which GCC
// vectorizes) gives ggml's values for both ISAs.
#include "cpu/attn_kvq.h"

namespace ei {

namespace {

struct FmaF32Prims {
    static void scale(int64_t n, float* y, float v) {
        for (int64_t i = 0; i < n; ++i) y[i] *= v;
    }
    static void mad(int64_t n, float* __restrict y, const float* __restrict x, float v) {
        for (int64_t i = 0; i < n; ++i) y[i] = std::fma(x[i], v, y[i]);
    }
    static void mad_q8_0(int64_t n, float* __restrict y, const block_q8_0* __restrict x, float v) {
        for (int64_t b = 0; b < n / QK8_0; ++b) {
            const float d = fp16_to_fp32(x[b].d);
            float* __restrict yb = y + b * QK8_0;
            for (int j = 0; j < QK8_0; ++j) yb[j] = std::fma((float)x[b].qs[j] * d, v, yb[j]);
        }
    }
    static float sum_update(float S, float ms, float vs) { return std::fma(S, ms, vs); }
};

void attn_kvq_row_fma(const float* q, const uint8_t* k, const uint8_t* v, size_t k_stride, size_t v_stride,
                      int64_t first, int64_t last, int64_t head_dim, float scale, const AttnKvTypes& t,
                      float* scratch, float* out, float* ms) {
    attend_row_kvq<FmaF32Prims>(q, k, v, k_stride, v_stride, first, last, head_dim, scale, t, scratch, out, ms);
}

}  // namespace

// The row kernel for both x86 tables; each sets its own span kernel after this
// (fill_attn_kvq_avx2 for both).
void fill_attn_kvq_fma(OpKernels& ops) {
    ops.attn_kvq_row = attn_kvq_row_fma;
    ops.attn_kvq_span = nullptr;
}

}  // namespace ei
