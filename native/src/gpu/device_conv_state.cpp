// The offloaded convolution layers' state on the device (see device_conv_state.h).
#include "gpu/device_conv_state.h"

#include <string>

#include "common/error.h"

namespace ei::cl {

DeviceConvState::DeviceConvState(Device& dev, DeviceOps& ops, KvCache& host, const std::vector<int>& layers,
                                 int64_t n_embd, int64_t l_cache)
    : dev_(dev), ops_(ops), host_(host), n_embd_(n_embd), l_cache_(l_cache) {
    if (layers.empty()) return;
    if (l_cache < 2) throw Error("offloaded short-convolution layers need a convolution of at least 2 taps");
    const size_t bytes = (size_t)(n_embd * (l_cache - 1)) * sizeof(float);
    // Zeros, as a new context's host state (which the Context adds after making the offload).
    const std::vector<float> zeros((size_t)(n_embd * (l_cache - 1)), 0.0f);
    for (int il : layers) {
        Buffer b = dev_.alloc(bytes, "the recurrent state of an offloaded convolution layer");
        dev_.write(b, zeros.data(), bytes);
        state_.emplace(il, std::move(b));
        bytes_ += bytes;
    }
}

float* DeviceConvState::host_state(int layer) {
    if (!host_.has_recurrent_state()) throw Error("the host cache has no recurrent state to sync with the device's");
    return host_.recurrent_state(layer);
}

void DeviceConvState::run(int layer, const Buffer& bcx, const Buffer& taps, const Buffer& y, int64_t n, int64_t pos0) {
    auto it = state_.find(layer);
    if (it == state_.end()) throw Error("layer " + std::to_string(layer) + " has no convolution state on the device");
    ops_.short_conv(bcx, taps, it->second, y, n, n_embd_, l_cache_, pos0 == 0);
}

void DeviceConvState::to_host() {
    for (auto& [il, b] : state_) dev_.read(b, host_state(il), b.bytes);
}

void DeviceConvState::to_device() {
    for (auto& [il, b] : state_) dev_.write(b, host_state(il), b.bytes);
}

}  // namespace ei::cl
