// The CPU's short convolution (LFM2; layers/shortconv_layer.h), in ggml's order: B*x (ggml_mul),
// the state prepended (ggml_concat), each output a sum over the taps from the oldest
// (ggml_ssm_conv), times C (ggml_mul).
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "layers/cpu_layer_ops.h"

namespace ei {

namespace {
// One sequence's n rows. state: [d][l - 1] each channel's last B*x values before these rows
// (ignored, as zeros, when `fresh`: the sequence starts here), then after them.
void short_conv_rows(const float* bcx, int64_t n, int64_t d, const float* kernel, int64_t l, float* state, bool fresh,
                     float* y, std::vector<float>& window) {
    const int64_t ds = l - 1;
    window.resize((size_t)(ds + n));
    float* w = window.data();  // [ds + n] one channel: state, then this call's B*x
    for (int64_t c = 0; c < d; ++c) {
        if (fresh) std::fill(w, w + ds, 0.0f);
        else std::memcpy(w, state + c * ds, sizeof(float) * ds);
        for (int64_t t = 0; t < n; ++t) w[ds + t] = bcx[t * 3 * d + c] * bcx[t * 3 * d + 2 * d + c];
        const float* k = kernel + c * l;
        for (int64_t t = 0; t < n; ++t) {
            float sum = 0.0f;
            for (int64_t j = 0; j < l; ++j) sum += w[t + j] * k[j];
            y[t * d + c] = bcx[t * 3 * d + d + c] * sum;
        }
        std::memcpy(state + c * ds, w + n, sizeof(float) * ds);
    }
}
}  // namespace

void CpuLayerOps::short_conv(int il, const float* bcx, int64_t n, int64_t d, int64_t pos0, const float* kernel,
                             int64_t l_cache, float* y) {
    auto run = [&](KvCache& kv, int64_t row0, int64_t rows, int64_t p0) {
        if (!kv.has_recurrent_state()) throw Error("a convolution layer needs its sequence's recurrent state");
        short_conv_rows(bcx + row0 * 3 * d, rows, d, kernel, l_cache, kv.recurrent_state(il), p0 == 0, y + row0 * d,
                        conv_window_);
    };
    if (!runs_) return run(kv_, 0, n, pos0);
    for (size_t i = 0; i < n_runs_; ++i) run(*runs_[i].kv, runs_[i].row0, runs_[i].n, runs_[i].pos0);
}

}  // namespace ei
