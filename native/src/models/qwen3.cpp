// The qwen3 architecture (dense Qwen 3), as llama.cpp runs it from GGUF: the shared decoder
// (models/decoder.h) with per-head RMS norms on Q and K before neox-mode RoPE, no biases.
#include "models/arch.h"
#include "models/decoder.h"

namespace ei {

namespace {

class Qwen3 final : public ArchModel {
public:
    Qwen3(const GgufFile& f, const KernelTable& kt) : hp_(read_hparams(f)) {
        const int64_t d = hp_.n_embd, qw = hp_.q_width(), kvw = hp_.kv_width();
        load_decoder_io(f, kt, hp_, w_);
        w_.layers.resize(hp_.n_layer);
        for (int il = 0; il < hp_.n_layer; ++il) {
            DecoderLayer& L = w_.layers[il];
            L.attn_norm = load_f32_vector(f, TensorKind::attn_norm, il, d);
            L.wq = load_tensor(f, kt, TensorKind::attn_q, il, {d, qw}, true);
            L.wk = load_tensor(f, kt, TensorKind::attn_k, il, {d, kvw}, true);
            L.wv = load_tensor(f, kt, TensorKind::attn_v, il, {d, kvw}, true);
            L.q_norm = load_f32_vector(f, TensorKind::attn_q_norm, il, hp_.head_dim);
            L.k_norm = load_f32_vector(f, TensorKind::attn_k_norm, il, hp_.head_dim);
            L.wo = load_tensor(f, kt, TensorKind::attn_output, il, {qw, d}, true);
            L.ffn_norm = load_f32_vector(f, TensorKind::ffn_norm, il, d);
            L.w_gate = load_tensor(f, kt, TensorKind::ffn_gate, il, {d, hp_.n_ff}, true);
            L.w_up = load_tensor(f, kt, TensorKind::ffn_up, il, {d, hp_.n_ff}, true);
            L.w_down = load_tensor(f, kt, TensorKind::ffn_down, il, {hp_.n_ff, d}, true);
        }
    }

    const HParams& hparams() const override { return hp_; }

    void forward(ForwardEnv& env, const ForwardBatch& b) const override { decoder_forward(env, b, hp_, w_, {}); }

    void rotate_cached_keys(const KernelTable& kt, int64_t, float* rows, int64_t m, int32_t delta) const override {
        decoder_rotate_keys(kt, hp_, rows, m, delta);
    }

private:
    HParams hp_;
    DecoderWeights w_;
};

}  // namespace

std::unique_ptr<ArchModel> load_qwen3(const GgufFile& file, const KernelTable& kt) {
    return std::make_unique<Qwen3>(file, kt);
}

}  // namespace ei
