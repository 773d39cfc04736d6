#include "kv/centered_k.h"

#include <cmath>

#include "common/fp16.h"

namespace ei {

namespace {

void column_means(const uint16_t* rows, int64_t n, int64_t width, float* mean) {
    for (int64_t c = 0; c < width; ++c) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(rows[i * width + c]);
        mean[c] = (float)(sum / (double)n);
    }
}

}  // namespace

void centering_from_sink(const uint16_t* sink_k, const uint16_t* sink_v, int64_t n_sink, int64_t width,
                         int64_t head_dim, float* out) {
    float* mean = out;           // mu
    float* scale = out + width;  // s
    column_means(sink_k, n_sink, width, mean);
    column_means(sink_v, n_sink, width, out + 2 * width);  // nu
    for (int64_t h = 0; h < width; h += head_dim) {
        // r_c: the channel's RMS around the mean; s_c = r_c^(1/2), normalized to an RMS of 1.
        double ss = 0.0;
        for (int64_t c = h; c < h + head_dim; ++c) {
            double var = 0.0;
            for (int64_t i = 0; i < n_sink; ++i) {
                const double d = fp16_to_fp32(sink_k[i * width + c]) - mean[c];
                var += d * d;
            }
            const double r = std::sqrt(var / (double)n_sink);
            scale[c] = (float)std::sqrt(r);
            ss += (double)scale[c] * scale[c];
        }
        const float rms = (float)std::sqrt(ss / (double)head_dim);
        for (int64_t c = h; c < h + head_dim; ++c)
            // A channel with no spread in the sink keys keeps a floor (a zero scale would divide by 0).
            scale[c] = rms > 0.0f ? std::fmax(scale[c] / rms, 1.0f / 16) : 1.0f;
    }
}

void k_center_row(const float* k, const float* mean, const float* scale, int64_t width, float* out) {
    for (int64_t c = 0; c < width; ++c) out[c] = (k[c] - mean[c]) / scale[c];
}

void k_uncenter_row(float* x, const float* mean, const float* scale, int64_t width) {
    for (int64_t c = 0; c < width; ++c) x[c] = x[c] * scale[c] + mean[c];
}

}  // namespace ei
