// The forward of offloaded layers (see offload.h).
#include "gpu/offload.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "layers/params.h"
#include "layers/shortconv_layer.h"
#include "quant/types.h"

namespace ei::cl {

Offload::Offload(const OffloadRequest& req, int64_t n_layer, int64_t n_ctx, int64_t n_batch, const LayerShapes& shapes,
                 int64_t fused_width, KvCache& host_kv, const std::vector<int>& conv_layers)
    : shapes_(shapes), n_ctx_(n_ctx), n_batch_(n_batch), layers_(req.layers) {
    if (!kv_supports(host_kv.type_k()) || !kv_supports(host_kv.type_v()) || host_kv.width() != shapes.kv_width() ||
        host_kv.head_dim() != shapes.head_dim || host_kv.n_ctx() != n_ctx)
        throw Error("offloaded layers need an f16/q8_0/q4_0 host KV cache of the model's width");
    std::sort(layers_.begin(), layers_.end());
    layers_.erase(std::unique(layers_.begin(), layers_.end()), layers_.end());
    for (int il : layers_)
        if (il < 0 || il >= n_layer)
            throw Error("cannot offload layer " + std::to_string(il) + ": the model has " + std::to_string(n_layer) +
                        " layers");
    dev_ = Device::open(req.library, req.device);
    programs_ = std::make_unique<ProgramCache>(*dev_, req.cache_dir);
    ops_ = std::make_unique<DeviceOps>(*dev_, *programs_);
    rope_ = std::make_unique<RopeTables>(*dev_, n_batch);

    const int64_t d = shapes.n_embd, qw = shapes.q_width(), kvw = shapes.kv_width();
    // Attention layers keep K/V rows, convolution layers a state; each in the host cache's
    // format, so syncs are plain copies.
    std::vector<int> attending, convolving;
    for (int il : layers_)
        (std::count(conv_layers.begin(), conv_layers.end(), il) ? convolving : attending).push_back(il);
    kv_ = std::make_unique<DeviceKvCache>(*dev_, *ops_, host_kv, attending, n_batch, shapes.n_head);
    conv_ = std::make_unique<DeviceConvState>(*dev_, *ops_, host_kv, convolving, shapes.n_embd, shapes.conv_l_cache);
    kv_bytes_ = kv_->bytes() + conv_->bytes();
    for (size_t i = 0; i < layers_.size(); ++i) {
        index_[layers_[i]] = i;
        device_layers_.push_back(std::make_unique<DeviceLayer>());
    }
    for (size_t i = 0; i < attending.size(); ++i) kv_slot_[attending[i]] = i;
    auto floats = [&](int64_t w, const char* what) { return dev_->alloc((size_t)(n_batch * w) * sizeof(float), what); };
    x_ = floats(d, "the hidden state");
    h_ = floats(d, "a normed hidden state");
    q_ = floats(qw, "Q");
    k_ = floats(kvw, "K");
    v_ = floats(kvw, "V");
    att_ = floats(qw, "the attention output");
    gate_ = floats(shapes.n_ff, "the FFN gate");
    up_ = floats(shapes.n_ff, "the FFN up projection");
    out_ = floats(d, "a sub-block output");
    if (fused_width > 0) fused_ = floats(fused_width, "a fused projection's output");
    if (shapes.experts.n_expert > 0) moe_ = std::make_unique<MoeBuffers>(*dev_, shapes, n_batch);
    if (!convolving.empty()) bcx_ = floats(3 * d, "a convolution's B, C and x");
}

Offload::~Offload() = default;

int Offload::range_end(int layer) const {
    int last = layer;
    while (on_device(last + 1)) ++last;
    return last;
}

void Offload::upload(int layer, const CpuLayerWeights& w, const LayerConfig& config) {
    auto it = index_.find(layer);
    if (it == index_.end()) throw Error("layer " + std::to_string(layer) + " is not offloaded");
    DeviceLayer& L = *device_layers_[it->second];
    auto vec = [&](const float* src, int64_t len, const char* what) {
        if (!src) return Buffer{};
        Buffer b = dev_->alloc((size_t)len * sizeof(float), what);
        dev_->write(b, src, b.bytes);
        weight_bytes_ += b.bytes;
        return b;
    };
    auto mat = [&](const Tensor& t, const char* what) {
        if (!t.present()) return DeviceMat{};
        if (!matmul_supports(t.type))
            throw Error("layer " + std::to_string(layer) + ": " + what + " is " + type_info(t.type).name +
                        ", which has no OpenCL matmul yet (keep this layer on the CPU)");
        const size_t bytes = t.row_bytes * (size_t)(t.rows() * t.ne[2]);  // ne[2]: a stack's matrices
        DeviceMat m{dev_->alloc(bytes, what), t.type, t.rows(), t.cols(), t.ne[2]};
        dev_->write(m.w, t.data, bytes);
        weight_bytes_ += bytes;
        return m;
    };
    if (w.conv_in.present() != conv_->has(layer))
        throw Error("layer " + std::to_string(layer) + (w.conv_in.present() ? " is" : " is not") +
                    " a short-convolution layer, unlike what the offload was made with");
    // LFM2-MoE's gating (sigmoid, experts chosen with a selection bias) has no device kernel: the
    // device's routing is the softmax's and gpt-oss's.
    if (w.ffn_gate_inp.present() && (shapes_.experts.sigmoid || w.ffn_exp_probs_b))
        throw Error("layer " + std::to_string(layer) +
                    " is a mixture of experts gated by sigmoid with a selection bias (LFM2-MoE), which has no "
                    "OpenCL path yet (keep this layer on the CPU)");
    if (!(config.rope.freq_base > 0.0f))
        throw Error("layer " + std::to_string(layer) + ": no rope base (the architecture did not set one)");
    const int64_t d = shapes_.n_embd, hd = shapes_.head_dim, qw = shapes_.q_width(), kvw = shapes_.kv_width();
    DeviceLayerWeights& D = L.w;
    D.attn_norm = vec(w.attn_norm, d, "attn_norm");
    D.wqkv = mat(w.wqkv, "attn_qkv");
    D.wq = mat(w.wq, "attn_q");
    D.wk = mat(w.wk, "attn_k");
    D.wv = mat(w.wv, "attn_v");
    D.bq = vec(w.bq, qw, "attn_q.bias");
    D.bk = vec(w.bk, kvw, "attn_k.bias");
    D.bv = vec(w.bv, kvw, "attn_v.bias");
    D.q_norm = vec(w.q_norm, hd, "attn_q_norm");
    D.k_norm = vec(w.k_norm, hd, "attn_k_norm");
    D.wo = mat(w.wo, "attn_output");
    D.bo = vec(w.bo, d, "attn_output.bias");
    D.attn_sinks = vec(w.attn_sinks, shapes_.n_head, "attn_sinks");
    D.post_attn_norm = vec(w.post_attn_norm, d, "post_attention_norm");
    D.ffn_norm = vec(w.ffn_norm, d, "ffn_norm");
    D.w_gate_up = mat(w.w_gate_up, "ffn_up (gate and up)");
    D.w_gate = mat(w.w_gate, "ffn_gate");
    D.w_up = mat(w.w_up, "ffn_up");
    D.w_down = mat(w.w_down, "ffn_down");
    D.post_ffn_norm = vec(w.post_ffn_norm, d, "post_ffw_norm");
    const ExpertShape& e = shapes_.experts;
    D.ffn_gate_inp = mat(w.ffn_gate_inp, "ffn_gate_inp");
    D.ffn_gate_exps = mat(w.ffn_gate_exps, "ffn_gate_exps");
    D.ffn_up_exps = mat(w.ffn_up_exps, "ffn_up_exps");
    D.ffn_down_exps = mat(w.ffn_down_exps, "ffn_down_exps");
    D.ffn_gate_inp_b = vec(w.ffn_gate_inp_b, e.n_expert, "ffn_gate_inp.bias");
    D.ffn_gate_exps_b = vec(w.ffn_gate_exps_b, e.n_expert * e.n_ff, "ffn_gate_exps.bias");
    D.ffn_up_exps_b = vec(w.ffn_up_exps_b, e.n_expert * e.n_ff, "ffn_up_exps.bias");
    D.ffn_down_exps_b = vec(w.ffn_down_exps_b, e.n_expert * d, "ffn_down_exps.bias");
    if (D.ffn_gate_inp.w.get() && !moe_)
        throw Error("layer " + std::to_string(layer) + " has experts but the offload has no scratch for them");
    D.conv_in = mat(w.conv_in, "shortconv.in_proj");
    D.conv_kernel = vec(w.conv_kernel, d * shapes_.conv_l_cache, "shortconv.conv");
    D.conv_out = mat(w.conv_out, "shortconv.out_proj");
    if ((D.wqkv.w.get() || D.w_gate_up.w.get()) && !fused_.get())
        throw Error("layer " + std::to_string(layer) + " has a fused projection but the offload has no scratch for it");
    L.config = config;
    rope_->add(config.rope);
    L.uploaded = true;
}

void Offload::sync_kv_to_host(int64_t n) {
    kv_->to_host(n);
    conv_->to_host();
}

void Offload::sync_kv_to_device(int64_t n) {
    kv_->to_device(n);
    conv_->to_device();
}

void Offload::run(int first, int last, float* x, int64_t n, int64_t pos0, int64_t r0) {
    if (n < 1 || n > n_batch_) throw Error("offloaded forward: " + std::to_string(n) + " tokens, batch holds " +
                                           std::to_string(n_batch_));
    if (r0 < 0 || r0 > n) throw Error("offloaded forward: row " + std::to_string(r0) + " is outside the batch");
    if (pos0 + n > n_ctx_) throw Error("offloaded forward: positions past the device KV cache");
    for (int il = first; il <= last; ++il) {
        auto it = index_.find(il);
        if (it == index_.end() || !device_layers_[it->second]->uploaded)
            throw Error("layer " + std::to_string(il) + " is not on the device");
    }
    rope_->write(n, pos0);
    const size_t row_bytes = (size_t)shapes_.n_embd * sizeof(float);
    // The only host -> device crossing of the hidden state for this range ...
    dev_->write(x_, x, (size_t)n * row_bytes);
    DeviceLayerOps ops(*ops_, *kv_, kv_slot_, *conv_, *rope_, shapes_.norm_eps, fused_, moe_.get());
    const LayerActs<FloatsAt> acts{x_, h_, q_, k_, v_, att_, gate_, up_, out_};
    for (int il = first; il <= last; ++il) {
        const DeviceLayer& L = *device_layers_[index_.at(il)];
        run_layer(ops, L.w, L.config, shapes_, acts, bcx_, il, n, pos0, il == last ? r0 : 0);
    }
    // ... and the only device -> host one (a blocking read: waits for the queued layers).
    if (r0 < n) dev_->read(x_, x + r0 * shapes_.n_embd, (size_t)(n - r0) * row_bytes, (size_t)r0 * row_bytes);
    else dev_->finish();  // no row goes on: the K/V cache was all this batch was for
}

}  // namespace ei::cl
