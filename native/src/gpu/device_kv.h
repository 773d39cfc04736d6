// The KV cache of the offloaded layers, kept on the device in the host cache's format
// (kv/kv_cache.h): per layer, K and V rows of the host cache's types, K rotated if the host's
// is, and for a centered cache the F16 sink rows of positions 0 .. n_sink - 1 (K and V) and the
// layer's mu, s, nu (kv/centered_k.h). Same bytes, so syncing with the host cache (snapshots,
// saved states, prefix reuse, context shift) is plain copies.
//
// mu, s and nu are computed once per context, when position n_sink - 1 is stored: the sink rows
// are read back and centering_from_sink (the CPU's function) runs on the host, then its result
// is uploaded. A sync to the device uploads them too.
#pragma once
#include <cstdint>
#include <vector>

#include "gpu/ops.h"
#include "gpu/runtime.h"
#include "kv/kv_cache.h"

namespace ei::cl {

class DeviceKvCache {
public:
    // host: the cache whose format (types, rotation, centering, n_ctx) the device copies, and
    // which the syncs copy to and from; layers: its layers kept on the device (slot i holds
    // layers[i]); n_batch, n_head: the most rows one store / attend takes and the query heads.
    DeviceKvCache(Device& dev, DeviceOps& ops, KvCache& host, std::vector<int> layers, int64_t n_batch,
                  int64_t n_head);

    size_t bytes() const { return bytes_; }  // device memory of the cache and its scratch

    // K and V rows k, v: [n][width] floats (K roped) of positions pos0 .. pos0 + n - 1, into slot
    // `slot` (n <= n_batch): centered, rotated and quantized as the host cache stores them.
    void store(size_t slot, const Buffer& k, const Buffer& v, int64_t pos0, int64_t n);
    // out[n][n_head][head_dim] = causal attention of q [n][n_head][head_dim] (query t at position
    // pos0 + t) over slot `slot`'s rows up to pos0 + n.
    void attend(size_t slot, FloatsAt q, const Buffer& out, int64_t n, int64_t pos0, const AttentionDims& a);

    // Positions [0, n) of every slot (rows, sink rows, and mu / s / nu once n >= n_sink) from the
    // device into the host cache, or from the host cache to the device.
    void to_host(int64_t n);
    void to_device(int64_t n);

private:
    // The byte ranges the first n positions occupy: rows from r0 on (a centered cache's quantized
    // rows start at n_sink; the slots below stay unused, never written on the device, so not
    // copied either way) and the F16 sink rows below r0.
    struct SyncSpan {
        size_t k_off, v_off, k_bytes, v_bytes, sink_bytes;
    };
    SyncSpan sync_span(int64_t n) const;

    struct Layer {
        Buffer k, v;              // [n_ctx] rows of type_k / type_v
        Buffer sink_k, sink_v;    // [n_sink][width] F16 (centered caches only)
        Buffer centering;         // [3][width] floats: mu, s, nu (centered caches only)
        bool centering_set = false;
    };
    // Reads slot's sink rows back, computes mu, s, nu on the host and uploads them.
    void set_centering(Layer& L);

    Device& dev_;
    DeviceOps& ops_;
    KvCache& host_;
    std::vector<int> layers_;
    std::vector<Layer> slots_;
    int64_t n_batch_, width_, head_dim_, n_sink_;
    bool rotated_;
    // Scratch of rotated / centered caches: the rows being stored, encoded ([n_batch][width]
    // floats, K and V), and the queries R(q * s) ([n_batch][n_head][head_dim]) and their score
    // bias ([n_batch][n_head]).
    Buffer k_enc_, v_enc_, q_enc_, bias_;
    size_t bytes_ = 0;
};

}  // namespace ei::cl
