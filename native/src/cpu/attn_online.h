// The online-softmax loop of ggml's one-row flash attention over an F16 cache
// (ggml_compute_forward_flash_attn_ext_f16_one_chunk with F16 K and V), for several queries over
// the same K/V rows (kernels.h, AttnF16RowsFn): each query's operations are the one-row kernel's,
// in its order; only the queries' steps are interleaved, position by position. Written once and
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
#include "cpu/attn_sink.h"
#include "cpu/kernels.h"

namespace ei {
namespace {

template <class P>
void attend_rows_f16(const AttnF16Query* queries, int64_t m, const uint16_t* k, const uint16_t* v,
                     int64_t kv_stride, int64_t head_dim, float scale, uint16_t* scratch) {
    float S[kAttnMaxQueries];   // running sums of exp(s - M)
    float M[kAttnMaxQueries];   // running maxima of s
    int64_t lo = queries[0].first, hi = queries[0].last;
    for (int64_t j = 0; j < m; ++j) {
        P::to_f16(queries[j].q, scratch + 2 * j * head_dim, head_dim);   // Q as F16
        std::memset(scratch + (2 * j + 1) * head_dim, 0, head_dim * sizeof(uint16_t));   // VKQ, F16
        S[j] = 0.0f;
        M[j] = -INFINITY;
        lo = queries[j].first < lo ? queries[j].first : lo;
        hi = queries[j].last > hi ? queries[j].last : hi;
    }
    for (int64_t ic = lo; ic <= hi; ++ic) {
        const uint16_t* k_row = k + ic * kv_stride;
        const uint16_t* v_row = v + ic * kv_stride;
        for (int64_t j = 0; j < m; ++j) {
            if (ic < queries[j].first || ic > queries[j].last) continue;
            const uint16_t* q16 = scratch + 2 * j * head_dim;
            uint16_t* acc = scratch + (2 * j + 1) * head_dim;
            // (ggml adds the mask value here; for the positions we visit it is +0.0f, a no-op)
            const float s = P::dot(head_dim, k_row, q16) * scale;
            const float m_old = M[j];
            float ms = 1.0f;  // rescales the accumulator and S when the maximum moves
            float vs = 1.0f;  // exp(s - M): this position's weight
            if (s > M[j]) {
                M[j] = s;
                ms = std::exp(m_old - s);
                P::scale(head_dim, acc, ms);
            } else {
                vs = std::exp(s - M[j]);
            }
            P::mad(head_dim, acc, v_row, vs);
            S[j] = P::sum_update(S[j], ms, vs);
        }
    }
    for (int64_t j = 0; j < m; ++j) {
        const uint16_t* acc = scratch + (2 * j + 1) * head_dim;
        if (queries[j].sink != -INFINITY) {  // VKQ in F32, scaled by the sink's step, then by 1/S
            const float ms = attention_sink_step(queries[j].sink, M[j], S[j], P::sum_update);
            const float inv = S[j] == 0.0f ? 0.0f : 1.0f / S[j];
            for (int64_t d = 0; d < head_dim; ++d) queries[j].out[d] = fp16_to_fp32(acc[d]) * ms * inv;
            continue;
        }
        const float inv = S[j] == 0.0f ? 0.0f : 1.0f / S[j];
        for (int64_t d = 0; d < head_dim; ++d) queries[j].out[d] = fp16_to_fp32(acc[d]) * inv;
    }
}

}  // namespace
}  // namespace ei
