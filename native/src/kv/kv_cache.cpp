#include "kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/fp16.h"
#include "kv/centered_k.h"
#include "kv/hadamard.h"
#include "quant/blocks.h"

namespace ei {

namespace {

// F16 rows as the existing cache always wrote them (ggml's scalar fp32 -> fp16 rounding).
void store_row_f16(const float* src, void* dst, int64_t n) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
}

// Q4_0 rows for the cache, with each block's scale chosen to minimize the squared error.
// ggml's quantize_row_q4_0_ref takes d = max / -8 (max: the value of largest magnitude, sign kept),
// which spends the end level on that one value and rounds the rest coarsely; here d is searched
// over max / -8 and max / 7 (the other end of the asymmetric range [-8, 7]) shrunk by up to 30 %,
// values are rounded to nearest and clamped, and the candidate with the least error (measured with
// d rounded to F16, as stored) is kept. The blocks are ordinary Q4_0 (x = d * (q - 8)), read by
// every Q4_0 kernel; only which d is chosen differs.
void store_row_q4_0(const float* x, void* dst, int64_t n) {
    block_q4_0* y = static_cast<block_q4_0*>(dst);
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const float* xb = x + i * QK4_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; ++j)
            if (amax < std::fabs(xb[j])) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        uint16_t best_d = 0;
        float best_err = INFINITY;
        for (int side = 0; side < 2 && amax > 0.0f; ++side)
            for (int step = 0; step <= 12; ++step) {
                const uint16_t d16 = fp32_to_fp16((side == 0 ? max / -8.0f : max / 7.0f) * (1.0f - 0.025f * step));
                const float d = fp16_to_fp32(d16);
                if (d == 0.0f) continue;
                const float id = 1.0f / d;
                float err = 0.0f;
                for (int j = 0; j < QK4_0; ++j) {
                    const float q = std::fmin(7.0f, std::fmax(-8.0f, std::nearbyint(xb[j] * id)));
                    const float e = xb[j] - d * q;
                    err += e * e;
                }
                if (err < best_err) {
                    best_err = err;
                    best_d = d16;
                }
            }
        const float d = fp16_to_fp32(best_d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = best_d;
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const int q0 = (int)std::fmin(7.0f, std::fmax(-8.0f, std::nearbyint(xb[j] * id))) + 8;
            const int q1 = (int)std::fmin(7.0f, std::fmax(-8.0f, std::nearbyint(xb[j + QK4_0 / 2] * id))) + 8;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

FromFloatFn row_quantizer(const KernelTable& kt, uint32_t type) {
    switch (type) {
        case TYPE_F16: return store_row_f16;
        case TYPE_Q8_0: return kt.types[TYPE_Q8_0].from_float;  // ggml-cpu's quantize_row_q8_0
        case TYPE_Q4_0: return store_row_q4_0;
        default: throw Error(std::string("unsupported KV cache type ") + type_info(type).name);
    }
}

size_t checked_row_bytes(uint32_t type, int64_t width) {
    const TypeInfo& ti = type_info(type);
    if (width % ti.block_size != 0)
        throw Error(std::string("KV cache type ") + kv_type_name(type) + " needs rows that are a multiple of " +
                    std::to_string(ti.block_size) + " values; this model's K/V rows have " + std::to_string(width));
    return row_bytes(type, width);
}

int64_t checked_head_dim(int64_t width, int64_t head_dim, bool rotate_k) {
    if (head_dim < 1 || width % head_dim != 0)
        throw Error("KV cache rows of " + std::to_string(width) + " values are not whole heads of " +
                    std::to_string(head_dim));
    if (rotate_k && !hadamard_supported(head_dim))
        throw Error("a rotated K cache needs head_dim to be a power of two; this model's is " +
                    std::to_string(head_dim));
    return head_dim;
}

int64_t checked_n_sink(uint32_t type_k, int64_t n_ctx, bool center_k) {
    if (!center_k) return 0;
    if (type_k != TYPE_Q8_0 && type_k != TYPE_Q4_0)
        throw Error(std::string("a centered K cache needs a quantized K (q8_0 or q4_0), not ") + kv_type_name(type_k));
    return std::min<int64_t>(kSinkRows, n_ctx);
}

}  // namespace

bool kv_rotate_k_by_default(uint32_t type_k) { return type_k == TYPE_Q4_0; }
bool kv_center_k_by_default(uint32_t type_k) { return type_k == TYPE_Q4_0; }

uint32_t kv_type_from_name(const std::string& name) {
    if (name == "f16") return TYPE_F16;
    if (name == "q8_0") return TYPE_Q8_0;
    if (name == "q4_0") return TYPE_Q4_0;
    throw Error("unknown KV cache type '" + name + "' (expected f16, q8_0 or q4_0)");
}

const char* kv_type_name(uint32_t type) {
    switch (type) {
        case TYPE_F16: return "f16";
        case TYPE_Q8_0: return "q8_0";
        case TYPE_Q4_0: return "q4_0";
        default: return type_info(type).name;
    }
}

KvCache::KvCache(const KernelTable& kt, int64_t n_layer, int64_t n_ctx, int64_t width, int64_t head_dim,
                 uint32_t type_k, uint32_t type_v, bool rotate_k, bool center_k)
    : n_layer_(n_layer), n_ctx_(n_ctx), width_(width), head_dim_(checked_head_dim(width, head_dim, rotate_k)),
      type_k_(type_k), type_v_(type_v), rotate_k_(rotate_k), n_sink_(checked_n_sink(type_k, n_ctx, center_k)),
      k_row_(checked_row_bytes(type_k, width)), v_row_(checked_row_bytes(type_v, width)),
      quantize_k_(row_quantizer(kt, type_k)), quantize_v_(row_quantizer(kt, type_v)),
      dequantize_k_(kt.types[type_k].to_float), dequantize_v_(kt.types[type_v].to_float),
      k_((size_t)(n_layer * n_ctx) * k_row_), v_((size_t)(n_layer * n_ctx) * v_row_),
      sink_k_((size_t)(n_layer * n_sink_ * width)), sink_v_((size_t)(n_layer * n_sink_ * width)),
      centering_(n_sink_ ? (size_t)(n_layer * 3 * width) : 0),
      k_tmp_((size_t)width) {}

uint16_t* KvCache::k(int64_t layer) {
    if (type_k_ != TYPE_F16) throw Error("the K cache is not F16");
    return reinterpret_cast<uint16_t*>(k_data(layer));
}

uint16_t* KvCache::v(int64_t layer) {
    if (type_v_ != TYPE_F16) throw Error("the V cache is not F16");
    return reinterpret_cast<uint16_t*>(v_data(layer));
}

void KvCache::encode_k_row(int64_t layer, int64_t pos, const float* k) {
    const float* src = k;
    if (n_sink_ > 0) {
        k_center_row(k, k_mean(layer), k_scale(layer), width_, k_tmp_.data());
        src = k_tmp_.data();
    }
    if (rotate_k_) {
        if (src != k_tmp_.data()) std::memcpy(k_tmp_.data(), k, width_ * sizeof(float));
        hadamard_rotate(k_tmp_.data(), width_ / head_dim_, head_dim_);
        src = k_tmp_.data();
    }
    quantize_k_(src, k_data(layer) + pos * k_row_, width_);
}

void KvCache::k_row_floats(int64_t layer, int64_t pos, float* k) const {
    if (pos < n_sink_) {
        const uint16_t* h = sink_k(layer) + pos * width_;
        for (int64_t c = 0; c < width_; ++c) k[c] = fp16_to_fp32(h[c]);
        return;
    }
    dequantize_k_(k_data(layer) + pos * k_row_, k, width_);
    if (rotate_k_) hadamard_unrotate(k, width_ / head_dim_, head_dim_);
    if (n_sink_ > 0) k_uncenter_row(k, k_mean(layer), k_scale(layer), width_);
}

void KvCache::v_row_floats(int64_t layer, int64_t pos, float* v) const {
    if (pos < n_sink_) {
        const uint16_t* h = sink_v(layer) + pos * width_;
        for (int64_t c = 0; c < width_; ++c) v[c] = fp16_to_fp32(h[c]);
        return;
    }
    dequantize_v_(v_data(layer) + pos * v_row_, v, width_);
    if (n_sink_ > 0)
        for (int64_t c = 0; c < width_; ++c) v[c] += v_mean(layer)[c];
}

void KvCache::store(int64_t layer, int64_t pos0, int64_t n, const float* k_rows, const float* v_rows) {
    for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = pos0 + t;
        const float* kr = k_rows + t * width_;
        const float* vr = v_rows + t * width_;
        if (pos < n_sink_) {
            uint16_t* hk = sink_k_.data() + (layer * n_sink_ + pos) * width_;
            uint16_t* hv = sink_v_.data() + (layer * n_sink_ + pos) * width_;
            for (int64_t c = 0; c < width_; ++c) {
                hk[c] = fp32_to_fp16(kr[c]);
                hv[c] = fp32_to_fp16(vr[c]);
            }
            if (pos == n_sink_ - 1)
                centering_from_sink(sink_k(layer), sink_v(layer), n_sink_, width_, head_dim_,
                                    centering_.data() + layer * 3 * width_);
            continue;
        }
        encode_k_row(layer, pos, kr);
        if (n_sink_ > 0) {  // V centered on nu
            const float* nu = v_mean(layer);
            for (int64_t c = 0; c < width_; ++c) k_tmp_[c] = vr[c] - nu[c];
            vr = k_tmp_.data();
        }
        quantize_v_(vr, v_data(layer) + pos * v_row_, width_);
    }
}

size_t KvCache::sink_layer_bytes(int64_t n) const {
    if (n_sink_ == 0) return 0;
    return (size_t)(std::min(n, n_sink_) * width_) * 2 * sizeof(uint16_t) +
           (n >= n_sink_ ? (size_t)width_ * 3 * sizeof(float) : 0);
}

size_t KvCache::rows_bytes(int64_t n) const {
    return (size_t)n * bytes_per_token() + n_layer_ * sink_layer_bytes(n) + recurrent_.size() * sizeof(float);
}

void KvCache::add_recurrent_state(int64_t floats_per_layer) {
    recurrent_floats_ = floats_per_layer;
    recurrent_.assign((size_t)(n_layer_ * floats_per_layer), 0.0f);
}

void KvCache::copy_rows_out(int64_t n, uint8_t* dst) const {
    const size_t sink_rows = (size_t)(std::min(n, n_sink_) * width_) * sizeof(uint16_t);
    for (int64_t il = 0; il < n_layer_; ++il) {
        std::memcpy(dst, k_data(il), n * k_row_);
        dst += n * k_row_;
        std::memcpy(dst, v_data(il), n * v_row_);
        dst += n * v_row_;
        if (n_sink_ == 0) continue;
        std::memcpy(dst, sink_k(il), sink_rows);
        dst += sink_rows;
        std::memcpy(dst, sink_v(il), sink_rows);
        dst += sink_rows;
        if (n < n_sink_) continue;
        std::memcpy(dst, k_mean(il), 3 * width_ * sizeof(float));
        dst += 3 * width_ * sizeof(float);
    }
    if (!recurrent_.empty()) std::memcpy(dst, recurrent_.data(), recurrent_.size() * sizeof(float));
}

void KvCache::copy_rows_in(int64_t n_stored, int64_t n_use, const uint8_t* src) {
    const size_t sink_stored = (size_t)(std::min(n_stored, n_sink_) * width_) * sizeof(uint16_t);
    const size_t sink_use = (size_t)(std::min(n_use, n_sink_) * width_) * sizeof(uint16_t);
    for (int64_t il = 0; il < n_layer_; ++il) {
        std::memcpy(k_data(il), src, n_use * k_row_);
        src += n_stored * k_row_;
        std::memcpy(v_data(il), src, n_use * v_row_);
        src += n_stored * v_row_;
        if (n_sink_ == 0) continue;
        std::memcpy(sink_k_.data() + il * n_sink_ * width_, src, sink_use);
        src += sink_stored;
        std::memcpy(sink_v_.data() + il * n_sink_ * width_, src, sink_use);
        src += sink_stored;
        if (n_stored < n_sink_) continue;
        // With n_use < n_sink the mean and scale are set again when position n_sink - 1 is stored.
        std::memcpy(centering_.data() + il * 3 * width_, src, 3 * width_ * sizeof(float));
        src += 3 * width_ * sizeof(float);
    }
    // The state after position n_stored - 1: the Context restores it only with n_use == n_stored.
    if (!recurrent_.empty()) std::memcpy(recurrent_.data(), src, recurrent_.size() * sizeof(float));
}

void KvCache::shift(int64_t n_past, int64_t n_keep, int64_t n_discard,
                    const std::function<void(int64_t, float*, int64_t)>& rerotate) {
    const int64_t first = n_keep + n_discard, m = n_past - first;  // rows that move
    if (m <= 0) return;
    std::vector<float> rows((size_t)(m * width_)), vrow((size_t)width_);
    for (int64_t il = 0; il < n_layer_; ++il) {
        for (int64_t t = 0; t < m; ++t) k_row_floats(il, first + t, rows.data() + t * width_);
        rerotate(il, rows.data(), m);
        // Rows move down (to n_keep + t from first + t), so in increasing t no row is overwritten
        // before it is read.
        for (int64_t t = 0; t < m; ++t) {
            const int64_t from = first + t, to = n_keep + t;
            const float* kr = rows.data() + t * width_;
            if (to >= n_sink_) {  // then from >= n_sink too: V moves as it is
                encode_k_row(il, to, kr);
                std::memmove(v_data(il) + to * v_row_, v_data(il) + from * v_row_, v_row_);
                continue;
            }
            uint16_t* hk = sink_k_.data() + (il * n_sink_ + to) * width_;
            uint16_t* hv = sink_v_.data() + (il * n_sink_ + to) * width_;
            for (int64_t c = 0; c < width_; ++c) hk[c] = fp32_to_fp16(kr[c]);
            if (from < n_sink_) {
                std::memmove(hv, sink_v_.data() + (il * n_sink_ + from) * width_, width_ * sizeof(uint16_t));
            } else {
                v_row_floats(il, from, vrow.data());
                for (int64_t c = 0; c < width_; ++c) hv[c] = fp32_to_fp16(vrow[c]);
            }
        }
    }
}

}  // namespace ei
