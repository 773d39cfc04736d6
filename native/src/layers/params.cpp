#include "layers/params.h"

#include <algorithm>
#include <cmath>

namespace ei {

namespace {

// The dim at which a frequency turns n_rotations times in n_ctx_orig positions
// (ggml_rope_yarn_corr_dim), in its float operations.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rotations, float base) {
    return (float)n_dims * std::log((float)n_ctx_orig / (n_rotations * 2.0f * (float)M_PI)) / (2.0f * std::log(base));
}

// 1 at the extrapolated pairs, 0 at the interpolated ones, linear between (rope_yarn_ramp).
float yarn_ramp(float low, float high, int64_t i0) {
    const float y = ((float)(int)(i0 / 2) - low) / std::max(0.001f, high - low);
    return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

}  // namespace

bool same_rotation(const RopeParams& a, const RopeParams& b) {
    return a.n_rot == b.n_rot && a.freq_base == b.freq_base && a.freq_scale == b.freq_scale &&
           a.freq_factors == b.freq_factors && a.attn_factor == b.attn_factor && a.ext_factor == b.ext_factor &&
           a.n_ctx_orig == b.n_ctx_orig && a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
           a.scale_magnitude == b.scale_magnitude;
}

void rope_yarn_corr_dims(const RopeParams& p, float dims[2]) {
    const int n_dims = (int)p.n_rot;
    const float start = std::floor(yarn_corr_dim(n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base));
    const float end = std::ceil(yarn_corr_dim(n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base));
    dims[0] = std::max(0.0f, start);
    dims[1] = std::min((float)(n_dims - 1), end);
}

void rope_cos_sin(const RopeParams& p, int32_t pos, float* cs) {
    const float theta_scale = std::pow(p.freq_base, -2.0f / (float)p.n_rot);
    const bool yarn = p.ext_factor != 0.0f;
    float corr[2] = {0.0f, 0.0f};
    float mscale = p.attn_factor;
    if (yarn) {
        rope_yarn_corr_dims(p, corr);
        // ggml-cpu is built with FMA contraction: 1 + 0.1 ln(1 / freq_scale) is one fused op.
        mscale *= std::fma(0.1f, std::log(1.0f / p.freq_scale), 1.0f);
    }
    if (!p.scale_magnitude) mscale = 1.0f;
    float theta = (float)pos;
    for (int64_t i0 = 0; i0 < p.n_rot; i0 += 2) {
        const float ff = p.freq_factors ? p.freq_factors[i0 / 2] : 1.0f;
        const float theta_extrap = theta / ff;
        const float theta_interp = p.freq_scale * theta_extrap;
        float angle = theta_interp;
        if (yarn) {
            const float ramp_mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
            // theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix, fused as ggml-cpu's build fuses it.
            angle = std::fma(theta_interp, 1.0f - ramp_mix, theta_extrap * ramp_mix);
        }
        cs[i0] = std::cos(angle) * mscale;
        cs[i0 + 1] = std::sin(angle) * mscale;
        theta *= theta_scale;
    }
}

}  // namespace ei
