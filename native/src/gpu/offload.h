// Layers offloaded to an OpenCL device: their weights copied to device buffers once, their KV
// cache kept on the device in the host cache's format (F16, Q8_0 or Q4_0, K rotated and
// centered as the host's: gpu/device_kv.h), a short-convolution layer's recurrent state likewise
// (gpu/device_conv_state.h), and a forward over a range of consecutive offloaded layers in which
// the hidden state crosses between host and device only at the range's two ends. Each layer is
// the one of layers/decoder_layer.h (or LFM2's convolution layer, layers/shortconv_layer.h), run
// with the device's ops (gpu/device_layer_ops.h): any architecture's layer, with the weights
// and settings the decoder (arch/decoder.h) holds for it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu/device_conv_state.h"
#include "gpu/device_kv.h"
#include "gpu/device_layer_ops.h"
#include "gpu/ops.h"
#include "gpu/program_cache.h"
#include "gpu/runtime.h"
#include "gpu/offload_types.h"
#include "kv/kv_cache.h"
#include "layers/cpu_layer_ops.h"
#include "layers/decoder_layer.h"
#include "layers/device_layers.h"

namespace ei::cl {

class Offload final : public DeviceLayers {
public:
    // Opens the device and allocates its KV cache ([n_ctx] rows of n_head_kv * head_dim values
    // per attention layer, K and V, in host_kv's format), each convolution layer's state, and
    // scratch for n_batch tokens (fused_width: floats per token of the widest fused projection,
    // 0 if none). Weights come later, through upload().
    // host_kv: the Context's cache, which keeps a staging copy of the offloaded layers' rows
    // (and convolution states) for what works on the host cache (snapshots, saved states,
    // context shift): see sync_*. conv_layers: the model's short-convolution layers (LFM2),
    // which have a recurrent state on the device instead of KV rows.
    Offload(const OffloadRequest& req, int64_t n_layer, int64_t n_ctx, int64_t n_batch, const LayerShapes& shapes,
            int64_t fused_width, KvCache& host_kv, const std::vector<int>& conv_layers);
    ~Offload() override;

    bool on_device(int layer) const override { return index_.count(layer) != 0; }
    int range_end(int layer) const override;
    const std::vector<int>& layers() const { return layers_; }

    // Copies layer `layer`'s weights to the device (every matrix type must be matmul_supports);
    // `config` is how it ropes and attends in this context.
    void upload(int layer, const CpuLayerWeights& w, const LayerConfig& config);
    // Runs layers first..last (all offloaded, consecutive) on x [n][n_embd] in place, for tokens
    // at positions pos0 .. pos0 + n - 1 (n <= n_batch); their K/V go to the device cache. Layer
    // `last` goes on past its K/V with rows r0.. only, which are the rows of x written back.
    void run(int first, int last, float* x, int64_t n, int64_t pos0, int64_t r0) override;

    // Copies positions [0, n) of every offloaded layer's K and V, and every offloaded
    // convolution layer's state, from the device into host_kv, or from host_kv to the device.
    // The forward never needs either; they run around snapshots, saved states and context shift.
    void sync_kv_to_host(int64_t n);
    void sync_kv_to_device(int64_t n);

    const DeviceInfo& device_info() const { return dev_->info(); }
    size_t weight_bytes() const { return weight_bytes_; }
    size_t kv_bytes() const { return kv_bytes_; }  // K/V rows and convolution states

private:
    struct DeviceLayer {
        DeviceLayerWeights w;
        LayerConfig config;
        bool uploaded = false;
    };

    std::unique_ptr<Device> dev_;
    std::unique_ptr<ProgramCache> programs_;
    std::unique_ptr<DeviceOps> ops_;
    LayerShapes shapes_;
    int64_t n_ctx_, n_batch_;
    std::vector<int> layers_;                // ascending
    std::map<int, size_t> index_;            // layer -> slot in device_layers_
    std::vector<std::unique_ptr<DeviceLayer>> device_layers_;  // by slot
    std::map<int, size_t> kv_slot_;          // attention layer -> its slot in kv_
    std::unique_ptr<DeviceKvCache> kv_;      // the offloaded attention layers, ascending
    std::unique_ptr<DeviceConvState> conv_;  // the offloaded convolution layers

    // Scratch, [n_batch][width] floats each: x (residual stream), h (normed input), q, k, v,
    // att (attention output), gate, up, out (sub-block output), fused (a fused projection's
    // output, when a layer has one), bcx (a convolution's B, C, x: [n_batch][3 n_embd], when
    // one is offloaded).
    Buffer x_, h_, q_, k_, v_, att_, gate_, up_, out_, fused_, bcx_;
    // A mixture of experts' scratch, when the model has experts (gpu/device_layer_ops.h).
    std::unique_ptr<MoeBuffers> moe_;
    // Rotation tables, one per distinct RoPE among the layers (Gemma 3 has two).
    std::unique_ptr<RopeTables> rope_;
    size_t weight_bytes_ = 0, kv_bytes_ = 0;
};

}  // namespace ei::cl
