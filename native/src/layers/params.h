// The numbers that describe a transformer layer's computation independently of the backend that
// runs it: its rotary embedding and its attention. Plain structs and host math only, shared by
// the CPU blocks (layers/cpu_blocks.h), the OpenCL layer ops (gpu/device_layer_ops.h) and the layer
// written once over both (layers/decoder_layer.h).
#pragma once
#include <cstdint>

namespace ei {

// Rotary position embedding on the first n_rot dims of each head, ggml's rope_ext. freq_factors
// (optional, [n_rot/2]) divide the angles (Llama 3.1 rope_freqs, Phi-3 LongRoPE); attn_factor
// scales cos and sin (ggml's mscale: Phi-3's LongRoPE attention factor, YaRN's magnitude).
//
// YaRN (ext_factor != 0): each pair's angle mixes the interpolated angle (freq_scale * theta) and
// the extrapolated one (theta) by a ramp over the pairs between the correction dims that beta_fast
// and beta_slow rotations in n_ctx_orig positions give; cos and sin are further scaled by
// 1 + 0.1 ln(1 / freq_scale).
struct RopeParams {
    int64_t n_rot;
    float freq_base;
    float freq_scale;
    const float* freq_factors;  // nullptr if none
    float attn_factor = 1.0f;
    float ext_factor = 0.0f;    // YaRN's extrapolation mix; 0: no YaRN
    int32_t n_ctx_orig = 0;     // YaRN: the context the model was trained at
    float beta_fast = 32.0f;    // YaRN: rotations where the ramp starts (pure extrapolation below)
    float beta_slow = 1.0f;     // YaRN: rotations where it ends (pure interpolation beyond)
    // false: cos and sin of the angle only, never scaled (a context shift rotates keys that hold
    // their magnitude already).
    bool scale_magnitude = true;
};

// The rotation of position `pos` as ggml_rope_cache_init builds it: theta_i = pos *
// base^(-2i/n_rot), formed by repeated multiplication in float (not pow per i), then
// cs[2i] = cos(angle_i) * mscale, cs[2i + 1] the sine (libm), where angle_i = freq_scale *
// theta_i / factor_i and mscale = attn_factor without YaRN; with it, rope_yarn's mix and magnitude
// in ggml's float operations (the FMAs GCC forms in ggml-cpu's build included).
// cs: [n_rot] floats. Every backend rotates by these floats, made on the host.
void rope_cos_sin(const RopeParams& p, int32_t pos, float* cs);

// Whether a and b give the same cos/sin at every position (every field above; freq_factors by
// address): layers that share one share a table.
bool same_rotation(const RopeParams& a, const RopeParams& b);

// YaRN's first and last correction dims (ggml_rope_yarn_corr_dims): the pairs below dims[0]
// extrapolate, those beyond dims[1] interpolate.
void rope_yarn_corr_dims(const RopeParams& p, float dims[2]);

// Causal grouped-query attention: n_head query heads over n_head_kv cached K/V heads, scores
// times `scale`; window > 0 limits each query to its last `window` positions; sinks (gpt-oss)
// join each head's softmax denominator (cpu/attn_sink.h).
struct AttentionShape {
    int64_t n_head, n_head_kv, head_dim;
    float scale;
    int64_t window;
    const float* sinks = nullptr;  // [n_head] attention-sink logits, or nullptr: none
};

}  // namespace ei
