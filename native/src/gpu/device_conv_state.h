// The recurrent state of the offloaded short-convolution layers (LFM2, layers/shortconv_layer.h),
// kept on the device beside them, in the host cache's layout (KvCache::recurrent_state: [n_embd]
// [l_cache - 1] floats a layer), as the device KV cache keeps the attention layers' rows.
//
// Why on the device: the convolution reads and replaces the state at every call, so a host copy
// would cost a read and a write of it around every offloaded range. Kept here, it crosses only
// where the host's copy is read or replaced, which are the points the KV rows already cross
// (Offload::sync_kv_to_host before a snapshot, a saved state or a shift; sync_kv_to_device after
// a restore or a shift): the host cache then holds one sequence's whole state, rows and
// convolutions alike. Starting a sequence afresh needs no sync: the kernel reads zeros at
// position 0, as the CPU does.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "gpu/ops.h"
#include "gpu/runtime.h"
#include "kv/kv_cache.h"

namespace ei::cl {

class DeviceConvState {
public:
    // host: the cache whose recurrent state (sequence 0's) the syncs copy; layers: the offloaded
    // convolution layers; n_embd, l_cache: the convolution's channels and taps.
    DeviceConvState(Device& dev, DeviceOps& ops, KvCache& host, const std::vector<int>& layers, int64_t n_embd,
                    int64_t l_cache);

    bool has(int layer) const { return state_.count(layer) != 0; }
    size_t bytes() const { return bytes_; }
    int64_t n_embd() const { return n_embd_; }
    int64_t l_cache() const { return l_cache_; }

    // y[n][n_embd] = layer's convolution of bcx [n][3 n_embd] (B, C, x) with taps [n_embd][l_cache],
    // for tokens at positions pos0 .. pos0 + n - 1, the layer's state carried over and replaced.
    void run(int layer, const Buffer& bcx, const Buffer& taps, const Buffer& y, int64_t n, int64_t pos0);

    // Every layer's state from the device into the host cache, or from it to the device.
    void to_host();
    void to_device();

private:
    float* host_state(int layer);  // the host cache's copy of layer's state (Error if it has none)

    Device& dev_;
    DeviceOps& ops_;
    KvCache& host_;
    int64_t n_embd_, l_cache_;
    std::map<int, Buffer> state_;  // layer -> [n_embd][l_cache - 1] floats
    size_t bytes_ = 0;
};

}  // namespace ei::cl
