#include "kv/kv_cache.h"

#include "common/fp16.h"

namespace ei {

KvCache::KvCache(int64_t n_layer, int64_t n_ctx, int64_t width)
    : n_layer_(n_layer), n_ctx_(n_ctx), width_(width),
      k_((size_t)(n_layer * n_ctx * width)), v_((size_t)(n_layer * n_ctx * width)) {}

void KvCache::store(int64_t layer, int64_t pos0, int64_t n, const float* k_rows, const float* v_rows) {
    uint16_t* kd = k(layer) + pos0 * width_;
    uint16_t* vd = v(layer) + pos0 * width_;
    for (int64_t i = 0; i < n * width_; ++i) {
        kd[i] = fp32_to_fp16(k_rows[i]);
        vd[i] = fp32_to_fp16(v_rows[i]);
    }
}

}  // namespace ei
