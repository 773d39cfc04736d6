#include "layers/params.h"

#include <cmath>

namespace ei {

void rope_cos_sin(const RopeParams& p, int32_t pos, float* cs) {
    const float theta_scale = std::pow(p.freq_base, -2.0f / (float)p.n_rot);
    float theta = (float)pos;
    for (int64_t i0 = 0; i0 < p.n_rot; i0 += 2) {
        const float ff = p.freq_factors ? p.freq_factors[i0 / 2] : 1.0f;
        const float angle = p.freq_scale * (theta / ff);
        cs[i0] = std::cos(angle) * p.attn_factor;
        cs[i0 + 1] = std::sin(angle) * p.attn_factor;
        theta *= theta_scale;
    }
}

}  // namespace ei
