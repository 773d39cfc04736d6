// Scalar references of the float ops (kernels.h, OpKernels): what ggml's CPU backend computes
// when built without SIMD (GGML_SIMD undefined). Plain C++ compiled for the baseline target, so
// no FMA contraction happens here. The ISA units (cpu/x86/ops_*.cpp) mirror ggml's SIMD builds
// instead; tests/test_ops.py bounds the difference between the two.
#include <cmath>

#include "common/fp16.h"
#include "cpu/attn_online.h"
#include "cpu/gelu_table.h"
#include "cpu/kernels.h"

namespace ei {

namespace {

struct ScalarF16Prims {
    static void to_f16(const float* x, uint16_t* y, int64_t n) {
        for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
    }
    // ggml_vec_dot_f16 without SIMD: products in float, summed in double (ggml_float).
    static float dot(int64_t n, const uint16_t* x, const uint16_t* y) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
        return (float)sum;
    }
    static void scale(int64_t n, uint16_t* y, float v) {
        for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
    }
    static void mad(int64_t n, uint16_t* y, const uint16_t* x, float v) {
        for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) + fp16_to_fp32(x[i]) * v);
    }
    static float sum_update(float S, float ms, float vs) { return S * ms + vs; }
};

void attn_f16_rows_ref(const AttnF16Query* queries, int64_t n_queries, const uint16_t* k, const uint16_t* v,
                        int64_t kv_stride, int64_t head_dim, float scale, uint16_t* scratch) {
    attend_rows_f16<ScalarF16Prims>(queries, n_queries, k, v, kv_stride, head_dim, scale, scratch);
}

// ggml_silu_f32(x) * g
void swiglu_ref(int64_t n, const float* gate, const float* up, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = (g / (1.0f + std::exp(-g))) * up[i];
    }
}

// ggml_vec_soft_max_f32 without SIMD: libm's expf a value, summed in double.
double soft_max_ref(int64_t n, const float* x, float max, float* y) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float v = std::exp(x[i] - max);
        sum += (double)v;
        y[i] = v;
    }
    return sum;
}

// rotate_pairs for GGML_ROPE_TYPE_NORMAL, then the unrotated tail copied.
void rope_rotate_ref(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                     const float* cs) {
    for (int64_t h = 0; h < n_heads; ++h) {
        const float* x = src + h * head_dim;
        float* y = dst + h * head_dim;
        for (int64_t i0 = 0; i0 < n_rot; i0 += 2) {
            const float c = cs[i0], s = cs[i0 + 1];
            const float x0 = x[i0], x1 = x[i0 + 1];
            y[i0] = x0 * c - x1 * s;
            y[i0 + 1] = x0 * s + x1 * c;
        }
        for (int64_t i = n_rot; i < head_dim; ++i) y[i] = x[i];
    }
}

// rotate_pairs for GGML_ROPE_TYPE_NEOX: element i pairs with element i + n_rot/2.
void rope_rotate_neox_ref(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                          const float* cs) {
    const int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
        const float* x = src + h * head_dim;
        float* y = dst + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float x0 = x[i], x1 = x[i + half];
            y[i] = x0 * c - x1 * s;
            y[i + half] = x0 * s + x1 * c;
        }
        for (int64_t i = n_rot; i < head_dim; ++i) y[i] = x[i];
    }
}

// ggml without FMA: the GELU table's inner term is not fused.
void geglu_ref(int64_t n, const float* gate, const float* up, float* out) {
    geglu_with_table(gelu_f16_table<false>(), n, gate, up, out);
}

}  // namespace

void fill_ops_scalar(OpKernels& ops) {
    ops.attn_f16_rows = attn_f16_rows_ref;
    ops.swiglu = swiglu_ref;
    ops.rope_rotate = rope_rotate_ref;
    ops.rope_rotate_neox = rope_rotate_neox_ref;
    ops.geglu = geglu_ref;
    ops.soft_max = soft_max_ref;
}

}  // namespace ei
