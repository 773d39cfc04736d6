// Attention sinks (gpt-oss): a learned logit per head that joins the softmax's denominator and
// adds no value, so a query may put weight "nowhere". ggml applies it once per row after the
// online softmax over the positions, before the division by the sum
// (ggml_compute_forward_flash_attn_ext_f16_one_chunk, and its tiled path, with src[4] set):
//
//   sink > M:  acc *= exp(M - sink); S = S * exp(M - sink) + 1     (the sink is the new maximum)
//   else:      S = S * 1 + exp(sink - M)
//
// attention_sink_step is that step on M and S; it returns the factor the caller scales the
// accumulator by (1 when the sink is below the maximum; scaling by 1 is exact). Every attention
// path here adds the sink through it. `sum_update(S, ms, vs)` is S * ms + vs as the caller's
// build of ggml rounds it (one FMA where ggml's build contracts it). In an anonymous namespace,
// as cpu/attn_online.h: each translation unit (some compiled with ISA flags) keeps its own copy.
#pragma once
#include <cmath>

namespace ei {
namespace {

inline float sum_update_plain(float S, float ms, float vs) { return S * ms + vs; }

template <class SumUpdate>
inline float attention_sink_step(float sink, float& M, float& S, SumUpdate sum_update) {
    float ms = 1.0f, vs = 1.0f;
    if (sink > M) {
        ms = std::exp(M - sink);
        M = sink;
    } else {
        vs = std::exp(sink - M);
    }
    S = sum_update(S, ms, vs);
    return ms;
}

inline float attention_sink_step(float sink, float& M, float& S) {
    return attention_sink_step(sink, M, S, sum_update_plain);
}

}  // namespace
}  // namespace ei
