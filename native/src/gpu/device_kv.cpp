// The offloaded layers' KV cache on the device (see device_kv.h).
#include "gpu/device_kv.h"

#include <algorithm>

#include "common/error.h"
#include "kv/centered_k.h"
#include "quant/types.h"

namespace ei::cl {

DeviceKvCache::DeviceKvCache(Device& dev, DeviceOps& ops, KvCache& host, std::vector<int> layers, int64_t n_batch,
                             int64_t n_head)
    : dev_(dev), ops_(ops), host_(host), layers_(std::move(layers)), n_batch_(n_batch), width_(host.width()),
      head_dim_(host.head_dim()), n_sink_(host.n_sink()), rotated_(host.k_rotated()) {
    if (!kv_supports(host.type_k()) || !kv_supports(host.type_v()))
        throw Error(std::string("offloaded layers need an f16, q8_0 or q4_0 KV cache, not ") +
                    kv_type_name(host.type_k()) + "/" + kv_type_name(host.type_v()));
    const size_t k_bytes = (size_t)host.n_ctx() * host.k_row_bytes(), v_bytes = (size_t)host.n_ctx() * host.v_row_bytes();
    const size_t sink_bytes = (size_t)(n_sink_ * width_) * sizeof(uint16_t);
    const std::vector<float> zeros((size_t)(3 * width_), 0.0f);
    for (size_t i = 0; i < layers_.size(); ++i) {
        Layer L;
        L.k = dev_.alloc(k_bytes, "the K cache of an offloaded layer");
        L.v = dev_.alloc(v_bytes, "the V cache of an offloaded layer");
        bytes_ += k_bytes + v_bytes;
        if (n_sink_ > 0) {
            L.sink_k = dev_.alloc(sink_bytes, "the F16 sink K rows of an offloaded layer");
            L.sink_v = dev_.alloc(sink_bytes, "the F16 sink V rows of an offloaded layer");
            L.centering = dev_.alloc(zeros.size() * sizeof(float), "the K / V means of an offloaded layer");
            // Zeros until position n_sink - 1 is stored: attention reads only sink rows before
            // that, but the query kernel multiplies by s, which must be a number.
            dev_.write(L.centering, zeros.data(), L.centering.bytes);
            bytes_ += 2 * sink_bytes + L.centering.bytes;
        }
        slots_.push_back(std::move(L));
    }
    if (rotated_ || n_sink_ > 0) {
        auto floats = [&](int64_t count, const char* what) {
            bytes_ += (size_t)count * sizeof(float);
            return dev_.alloc((size_t)count * sizeof(float), what);
        };
        k_enc_ = floats(n_batch * width_, "the rotated / centered K rows being stored");
        if (n_sink_ > 0) v_enc_ = floats(n_batch * width_, "the centered V rows being stored");
        q_enc_ = floats(n_batch * n_head * head_dim_, "the rotated / scaled queries");
        bias_ = floats(n_batch * n_head, "the score bias of a centered K");
    }
}

void DeviceKvCache::set_centering(Layer& L) {
    std::vector<uint16_t> sk((size_t)(n_sink_ * width_)), sv(sk.size());
    dev_.read(L.sink_k, sk.data(), sk.size() * sizeof(uint16_t));  // waits for the stores before it
    dev_.read(L.sink_v, sv.data(), sv.size() * sizeof(uint16_t));
    std::vector<float> centering((size_t)(3 * width_));
    centering_from_sink(sk.data(), sv.data(), n_sink_, width_, head_dim_, centering.data());
    dev_.write(L.centering, centering.data(), centering.size() * sizeof(float));
    L.centering_set = true;
}

void DeviceKvCache::store(size_t slot, const Buffer& k, const Buffer& v, int64_t pos0, int64_t n) {
    if (n < 1 || n > n_batch_ || pos0 < 0 || pos0 + n > host_.n_ctx())
        throw Error("device KV store: positions " + std::to_string(pos0) + " + " + std::to_string(n) +
                    " outside the cache or the batch");
    Layer& L = slots_.at(slot);
    // The batch's rows at positions below n_sink go to the F16 sink rows (centered caches).
    const int64_t n_head_rows = std::clamp<int64_t>(n_sink_ - pos0, 0, n);
    if (n_head_rows > 0) {
        ops_.kv_store(TYPE_F16, k, L.sink_k, pos0, n_head_rows, width_);
        ops_.kv_store(TYPE_F16, v, L.sink_v, pos0, n_head_rows, width_);
        if (pos0 + n_head_rows == n_sink_) set_centering(L);
    }
    const int64_t rest = n - n_head_rows, first = pos0 + n_head_rows;
    if (rest == 0) return;
    const bool centered = n_sink_ > 0;
    if (centered && !L.centering_set)
        throw Error("device KV store: position " + std::to_string(first) + " before the sink rows were complete");
    const Buffer* k_rows = &k;
    if (centered || rotated_) {
        ops_.kv_encode_k(k, k_enc_, L.centering, n_head_rows, rest, width_, head_dim_, centered, rotated_);
        k_rows = &k_enc_;
    }
    ops_.kv_store(host_.type_k(), *k_rows, L.k, first, rest, width_);
    const Buffer* v_rows = &v;
    if (centered) {
        ops_.kv_center_v(v, v_enc_, L.centering, n_head_rows, rest, width_);
        v_rows = &v_enc_;
    }
    ops_.kv_store(host_.type_v(), *v_rows, L.v, first, rest, width_);
}

void DeviceKvCache::attend(size_t slot, FloatsAt q, const Buffer& out, int64_t n, int64_t pos0,
                           const AttentionDims& a) {
    Layer& L = slots_.at(slot);
    const uint32_t tk = host_.type_k(), tv = host_.type_v();
    if (!rotated_ && n_sink_ == 0) {
        ops_.attention(tk, tv, q, L.k, L.v, out, n, pos0, a);
        return;
    }
    const bool centered = n_sink_ > 0;
    ops_.attention_query(q, q_enc_, bias_, L.centering, n, a, centered, rotated_);
    if (!centered) {
        ops_.attention(tk, tv, q_enc_, L.k, L.v, out, n, pos0, a);
        return;
    }
    const SinkRows sink{q, bias_, L.sink_k, L.sink_v, L.centering, n_sink_};
    ops_.attention(tk, tv, q_enc_, L.k, L.v, out, n, pos0, a, &sink);
}

DeviceKvCache::SyncSpan DeviceKvCache::sync_span(int64_t n) const {
    const int64_t r0 = std::min(n, n_sink_);
    return {(size_t)r0 * host_.k_row_bytes(), (size_t)r0 * host_.v_row_bytes(),
            (size_t)(n - r0) * host_.k_row_bytes(), (size_t)(n - r0) * host_.v_row_bytes(),
            (size_t)(r0 * width_) * sizeof(uint16_t)};
}

void DeviceKvCache::to_host(int64_t n) {
    n = std::clamp<int64_t>(n, 0, host_.n_ctx());
    const SyncSpan s = sync_span(n);
    for (size_t i = 0; i < slots_.size(); ++i) {
        const int il = layers_[i];
        Layer& L = slots_[i];
        dev_.read(L.k, host_.k_data(il) + s.k_off, s.k_bytes, s.k_off);
        dev_.read(L.v, host_.v_data(il) + s.v_off, s.v_bytes, s.v_off);
        if (n_sink_ == 0) continue;
        dev_.read(L.sink_k, host_.sink_k(il), s.sink_bytes);
        dev_.read(L.sink_v, host_.sink_v(il), s.sink_bytes);
        if (n >= n_sink_ && L.centering_set) dev_.read(L.centering, host_.centering(il), L.centering.bytes);
    }
}

void DeviceKvCache::to_device(int64_t n) {
    n = std::clamp<int64_t>(n, 0, host_.n_ctx());
    const SyncSpan s = sync_span(n);
    for (size_t i = 0; i < slots_.size(); ++i) {
        const int il = layers_[i];
        Layer& L = slots_[i];
        dev_.write(L.k, host_.k_data(il) + s.k_off, s.k_bytes, s.k_off);
        dev_.write(L.v, host_.v_data(il) + s.v_off, s.v_bytes, s.v_off);
        if (n_sink_ == 0) continue;
        dev_.write(L.sink_k, host_.sink_k(il), s.sink_bytes);
        dev_.write(L.sink_v, host_.sink_v(il), s.sink_bytes);
        // With fewer than n_sink positions, mu / s / nu are set again when position n_sink - 1
        // is stored (as the host cache does after copy_rows_in).
        L.centering_set = n >= n_sink_;
        if (L.centering_set) dev_.write(L.centering, host_.centering(il), L.centering.bytes);
    }
}

}  // namespace ei::cl
