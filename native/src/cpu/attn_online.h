// The online-softmax loop of ggml's one-row flash attention over an F16 cache
// (ggml_compute_forward_flash_attn_ext_f16_one_chunk with F16 K and V), written once and
// instantiated by each ISA with its own mirror of ggml's vector primitives:
//
//   P::to_f16(q, q16, n)          Q rounded to F16 (the K type's vec_dot_type)
//   P::dot(n, k16, q16)           ggml_vec_dot_f16: its accumulators and reduction order
//   P::scale(n, acc16, ms)        ggml_vec_scale_f16
//   P::mad(n, acc16, v16, vs)     ggml_vec_mad_f16
//   P::sum_update(S, ms, vs)      S*ms + vs, rounded the way ggml's build rounds it (GCC
//                                 contracts it to one FMA when FMA is enabled)
//
// Everything sits in an anonymous namespace: each translation unit (compiled with its own ISA
// flags) gets its own copy, so the linker can never hand one ISA's code to another.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/fp16.h"

namespace ei {
namespace {

template <class P>
void attend_row_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_stride, int64_t first,
                    int64_t last, int64_t head_dim, float scale, uint16_t* scratch, float* out) {
    uint16_t* q16 = scratch;              // [head_dim] Q as F16
    uint16_t* acc = scratch + head_dim;   // [head_dim] VKQ accumulator, F16
    P::to_f16(q, q16, head_dim);
    std::memset(acc, 0, head_dim * sizeof(uint16_t));

    float S = 0.0f;        // running sum of exp(s - M)
    float M = -INFINITY;   // running maximum of s
    for (int64_t ic = first; ic <= last; ++ic) {
        // (ggml adds the mask value here; for the positions we visit it is +0.0f, a no-op)
        const float s = P::dot(head_dim, k + ic * kv_stride, q16) * scale;
        const float m_old = M;
        float ms = 1.0f;  // rescales the accumulator and S when the maximum moves
        float vs = 1.0f;  // exp(s - M): this position's weight
        if (s > M) {
            M = s;
            ms = std::exp(m_old - M);
            P::scale(head_dim, acc, ms);
        } else {
            vs = std::exp(s - M);
        }
        P::mad(head_dim, acc, v + ic * kv_stride, vs);
        S = P::sum_update(S, ms, vs);
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t d = 0; d < head_dim; ++d) out[d] = fp16_to_fp32(acc[d]) * inv;
}

}  // namespace
}  // namespace ei
