// The forward of offloaded layers (see offload.h).
#include "gpu/offload.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "layers/params.h"
#include "quant/types.h"

namespace ei::cl {

struct Offload::DeviceLayer {
    Buffer attn_norm, ffn_norm;                        // [n_embd] floats
    Buffer q_norm, k_norm;                             // [head_dim] floats (if the layer has them)
    Buffer post_attn_norm, post_ffn_norm;              // [n_embd] floats (if the layer has them)
    float rope_freq_base = 0.0f, rope_freq_scale = 1.0f;      // from HostLayer
    int64_t window = 0;
    Buffer wq, wk, wv, wo, w_gate, w_up, w_down;       // the file's blocks, row after row
    uint32_t tq = 0, tk = 0, tv = 0, to = 0, tg = 0, tu = 0, td = 0;
    bool uploaded = false;
};

Offload::Offload(const OffloadRequest& req, int64_t n_layer, int64_t n_ctx, int64_t n_batch, const LayerDims& dims,
                 KvCache& host_kv)
    : dims_(dims), n_ctx_(n_ctx), n_batch_(n_batch), layers_(req.layers) {
    if (!kv_supports(host_kv.type_k()) || !kv_supports(host_kv.type_v()) ||
        host_kv.width() != dims.n_head_kv * dims.head_dim || host_kv.head_dim() != dims.head_dim ||
        host_kv.n_ctx() != n_ctx)
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

    const int64_t d = dims.n_embd, qw = dims.n_head * dims.head_dim, kvw = dims.n_head_kv * dims.head_dim;
    // The device rows have the host cache's format, so syncs are plain copies.
    kv_ = std::make_unique<DeviceKvCache>(*dev_, *ops_, host_kv, layers_, n_batch, dims.n_head);
    kv_bytes_ = kv_->bytes();
    for (size_t i = 0; i < layers_.size(); ++i) {
        index_[layers_[i]] = i;
        device_layers_.push_back(std::make_unique<DeviceLayer>());
    }
    auto floats = [&](int64_t w, const char* what) { return dev_->alloc((size_t)(n_batch * w) * sizeof(float), what); };
    x_ = floats(d, "the hidden state");
    h_ = floats(d, "a normed hidden state");
    q_ = floats(qw, "Q");
    k_ = floats(kvw, "K");
    v_ = floats(kvw, "V");
    att_ = floats(qw, "the attention output");
    gate_ = floats(dims.n_ff, "the FFN gate");
    up_ = floats(dims.n_ff, "the FFN up projection");
    out_ = floats(d, "a sub-block output");
}

Offload::~Offload() = default;

int Offload::range_end(int layer) const {
    int last = layer;
    while (on_device(last + 1)) ++last;
    return last;
}

void Offload::upload(int layer, const HostLayer& w) {
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
    auto mat = [&](const Tensor* t, uint32_t* type, const char* what) {
        if (!matmul_supports(t->type))
            throw Error("layer " + std::to_string(layer) + ": " + what + " is " + type_info(t->type).name +
                        ", which has no OpenCL matmul yet (keep this layer on the CPU)");
        *type = t->type;
        const size_t bytes = t->row_bytes * (size_t)t->rows();
        Buffer b = dev_->alloc(bytes, what);
        dev_->write(b, t->data, bytes);
        weight_bytes_ += bytes;
        return b;
    };
    const int64_t d = dims_.n_embd, hd = dims_.head_dim;
    L.attn_norm = vec(w.attn_norm, d, "attn_norm");
    L.ffn_norm = vec(w.ffn_norm, d, "ffn_norm");
    L.q_norm = vec(w.q_norm, hd, "attn_q_norm");
    L.k_norm = vec(w.k_norm, hd, "attn_k_norm");
    L.post_attn_norm = vec(w.post_attn_norm, d, "post_attention_norm");
    L.post_ffn_norm = vec(w.post_ffn_norm, d, "post_ffw_norm");
    if (!(w.rope_freq_base > 0.0f))
        throw Error("layer " + std::to_string(layer) + ": no rope base (the architecture did not set one)");
    L.rope_freq_base = w.rope_freq_base;
    L.rope_freq_scale = w.rope_freq_scale;
    const std::pair<float, float> rope_key{L.rope_freq_base, L.rope_freq_scale};
    if (!rope_cs_.count(rope_key))
        rope_cs_[rope_key] = dev_->alloc((size_t)(n_batch_ * dims_.n_rot) * sizeof(float), "a rope table");
    L.window = w.window;
    L.wq = mat(w.wq, &L.tq, "attn_q");
    L.wk = mat(w.wk, &L.tk, "attn_k");
    L.wv = mat(w.wv, &L.tv, "attn_v");
    L.wo = mat(w.wo, &L.to, "attn_output");
    L.w_gate = mat(w.w_gate, &L.tg, "ffn_gate");
    L.w_up = mat(w.w_up, &L.tu, "ffn_up");
    L.w_down = mat(w.w_down, &L.td, "ffn_down");
    L.uploaded = true;
}

void Offload::sync_kv_to_host(int64_t n) { kv_->to_host(n); }

void Offload::sync_kv_to_device(int64_t n) { kv_->to_device(n); }

void Offload::run(int first, int last, float* x, int64_t n, int64_t pos0) {
    if (n < 1 || n > n_batch_) throw Error("offloaded forward: " + std::to_string(n) + " tokens, batch holds " +
                                           std::to_string(n_batch_));
    if (pos0 + n > n_ctx_) throw Error("offloaded forward: positions past the device KV cache");
    const size_t x_bytes = (size_t)(n * dims_.n_embd) * sizeof(float);
    for (int il = first; il <= last; ++il) {
        auto it = index_.find(il);
        if (it == index_.end() || !device_layers_[it->second]->uploaded)
            throw Error("layer " + std::to_string(il) + " is not on the device");
    }
    write_rope_tables(first, last, n, pos0);
    // The only host -> device crossing of the hidden state for this range ...
    dev_->write(x_, x, x_bytes);
    for (int il = first; il <= last; ++il) run_layer(index_.at(il), n, pos0);
    // ... and the only device -> host one (a blocking read: waits for the queued layers).
    dev_->read(x_, x, x_bytes);
}

void Offload::write_rope_tables(int first, int last, int64_t n, int64_t pos0) {
    std::vector<std::pair<float, float>> done;
    std::vector<float> cs((size_t)(n * dims_.n_rot));
    for (int il = first; il <= last; ++il) {
        const DeviceLayer& L = *device_layers_[index_.at(il)];
        const std::pair<float, float> key{L.rope_freq_base, L.rope_freq_scale};
        if (std::find(done.begin(), done.end(), key) != done.end()) continue;
        done.push_back(key);
        const RopeParams p{dims_.n_rot, key.first, key.second, dims_.rope_factors};
        for (int64_t t = 0; t < n; ++t) rope_cos_sin(p, (int32_t)(pos0 + t), cs.data() + t * dims_.n_rot);
        dev_->write(rope_cs_.at(key), cs.data(), cs.size() * sizeof(float));
    }
}

void Offload::run_layer(size_t slot, int64_t n, int64_t pos0) {
    DeviceLayer& L = *device_layers_[slot];
    const LayerDims& s = dims_;
    const int64_t d = s.n_embd, qw = s.n_head * s.head_dim, kvw = s.n_head_kv * s.head_dim;
    DeviceOps& op = *ops_;
    op.rms_norm(x_, L.attn_norm, h_, n, d, s.norm_eps);
    op.matmul(L.tq, L.wq, qw, d, h_, n, q_);
    op.matmul(L.tk, L.wk, kvw, d, h_, n, k_);
    op.matmul(L.tv, L.wv, kvw, d, h_, n, v_);
    // Per-head norms: rows of head_dim values, in place.
    if (L.q_norm.get()) op.rms_norm(q_, L.q_norm, q_, n * s.n_head, s.head_dim, s.norm_eps);
    if (L.k_norm.get()) op.rms_norm(k_, L.k_norm, k_, n * s.n_head_kv, s.head_dim, s.norm_eps);
    const Buffer& cs = rope_cs_.at({L.rope_freq_base, L.rope_freq_scale});
    op.rope(q_, cs, n, RopeShape{s.n_head, s.head_dim, s.n_rot, s.rope_neox});
    op.rope(k_, cs, n, RopeShape{s.n_head_kv, s.head_dim, s.n_rot, s.rope_neox});
    kv_->store(slot, k_, v_, pos0, n);
    // A model that scales Q before attention (Gemma 3) attends with scale 1, as the CPU does:
    // the F16 rounding of Q inside attention then sees the same values.
    float scale = 1.0f / std::sqrt((float)s.head_dim);
    if (s.attn_scale > 0.0f) {
        op.scale(q_, s.attn_scale, n * qw);
        scale = 1.0f;
    }
    const AttentionDims a{s.n_head, s.n_head_kv, s.head_dim, scale, L.window};
    kv_->attend(slot, q_, att_, n, pos0, a);
    op.matmul(L.to, L.wo, d, qw, att_, n, out_);
    if (L.post_attn_norm.get()) op.rms_norm(out_, L.post_attn_norm, out_, n, d, s.norm_eps);
    op.add(x_, out_, n * d);

    op.rms_norm(x_, L.ffn_norm, h_, n, d, s.norm_eps);
    op.matmul(L.tg, L.w_gate, s.n_ff, d, h_, n, gate_);
    op.matmul(L.tu, L.w_up, s.n_ff, d, h_, n, up_);
    if (s.gelu) op.geglu(gate_, up_, gate_, n * s.n_ff);
    else op.swiglu(gate_, up_, gate_, n * s.n_ff);
    op.matmul(L.td, L.w_down, d, s.n_ff, gate_, n, out_);
    if (L.post_ffn_norm.get()) op.rms_norm(out_, L.post_ffn_norm, out_, n, d, s.norm_eps);
    op.add(x_, out_, n * d);
}

}  // namespace ei::cl
