// The numbers that describe a transformer layer's computation independently of the backend that
// runs it: its rotary embedding and its attention. Plain structs and host math only, shared by
// the CPU blocks (layers/cpu_blocks.h), the OpenCL layer ops (gpu/device_layer_ops.h) and the layer
// written once over both (layers/decoder_layer.h).
#pragma once
#include <cstdint>

namespace ei {

// Rotary position embedding on the first n_rot dims of each head. freq_factors (optional,
// [n_rot/2]) divide the angles (Llama 3.1 rope_freqs, Phi-3 LongRoPE); attn_factor scales cos
// and sin (ggml's mscale: Phi-3's LongRoPE attention factor).
struct RopeParams {
    int64_t n_rot;
    float freq_base;
    float freq_scale;
    const float* freq_factors;  // nullptr if none
    float attn_factor = 1.0f;
};

// The rotation of position `pos` as ggml_rope_cache_init builds it: theta_i = pos *
// base^(-2i/n_rot), formed by repeated multiplication in float (not pow per i), then
// cs[2i] = cos(freq_scale * theta_i / factor_i) * attn_factor, cs[2i + 1] the sine (libm).
// cs: [n_rot] floats. Every backend rotates by these floats, made on the host.
void rope_cos_sin(const RopeParams& p, int32_t pos, float* cs);

// Causal grouped-query attention: n_head query heads over n_head_kv cached K/V heads, scores
// times `scale`; window > 0 limits each query to its last `window` positions.
struct AttentionShape {
    int64_t n_head, n_head_kv, head_dim;
    float scale;
    int64_t window;
};

}  // namespace ei
