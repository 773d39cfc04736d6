// The online-softmax loop of ggml's one-row flash attention when V is not F16
// (ggml_compute_forward_flash_attn_ext_f16_one_chunk, the `else` branch: VKQ32 accumulator),
// used for quantized KV caches. Written once and instantiated per ISA with its mirror of ggml's
// f32 vector primitives:
//
//   P::scale(n, y, v)          ggml_vec_scale_f32: y *= v
//   P::mad(n, y, x, v)         ggml_vec_mad_f32:   y += x * v (one FMA per element in SIMD builds)
//   P::mad_q8_0(n, y, b, v)    dequantize_row_q8_0 then ggml_vec_mad_f32, fused: d * q is exact in
//                              float, so one pass gives the same values without the V32 buffer
//   P::sum_update(S, ms, vs)   S*ms + vs, rounded as ggml's build rounds it
//
// The K side goes through the type table (AttnKvTypes): Q is converted once to K's vec_dot_type
// and every score is K's own vec_dot, so a Q8_0 or Q4_0 cache is read in place, block by block.
// Anonymous namespace: each ISA translation unit gets its own copy (see attn_online.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/fp16.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

template <class P>
void attend_row_kvq(const float* q, const uint8_t* k, const uint8_t* v, size_t k_stride, size_t v_stride,
                    int64_t first, int64_t last, int64_t head_dim, float scale, const AttnKvTypes& t,
                    float* scratch, float* out, float* ms) {
    void* qk = scratch;                     // Q in K's vec_dot_type (at most 4 bytes per value)
    float* v32 = scratch + head_dim;        // [head_dim] one dequantized V row
    float* acc = scratch + 2 * head_dim;    // [head_dim] VKQ accumulator, F32
    t.q_to_k(q, qk, head_dim);
    std::memset(acc, 0, head_dim * sizeof(float));

    float S = 0.0f;        // running sum of exp(s - M)
    float M = -INFINITY;   // running maximum of s
    for (int64_t ic = first; ic <= last; ++ic) {
        float s;
        t.kq_dot(head_dim, &s, k + ic * k_stride, qk);
        s *= scale;
        const float m_old = M;
        float ms = 1.0f;
        float vs = 1.0f;
        if (s > M) {
            M = s;
            ms = std::exp(m_old - M);
            P::scale(head_dim, acc, ms);
        } else {
            vs = std::exp(s - M);
        }
        if (t.type_v == TYPE_Q8_0) {
            P::mad_q8_0(head_dim, acc, reinterpret_cast<const block_q8_0*>(v + ic * v_stride), vs);
        } else {
            t.v_to_float(v + ic * v_stride, v32, head_dim);
            P::mad(head_dim, acc, v32, vs);
        }
        S = P::sum_update(S, ms, vs);
    }
    if (ms) {  // partial: merged with other rows by the caller
        ms[0] = M;
        ms[1] = S;
        for (int64_t d = 0; d < head_dim; ++d) out[d] = acc[d];
        return;
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t d = 0; d < head_dim; ++d) out[d] = acc[d] * inv;
}

}  // namespace
}  // namespace ei
