// The phi3 architecture (Phi-3 / Phi-3.5 mini), as llama.cpp runs it from GGUF: the shared decoder
// (models/decoder.h) with one fused QKV projection (attn_qkv: Q, K, V rows in that order), one
// fused gate/up projection (ffn_up: [2 n_ff] rows, the gate half first), neox-mode RoPE over
// rope.dimension_count dims, and Q scaled by 1/sqrt(head_dim) before attention as llama.cpp's
// graph does. Like llama.cpp, the sliding window some configs name is not applied, and the
// LongRoPE factors of the 128k-context models are not supported yet (refused at load).
#include "models/arch.h"
#include "models/decoder.h"

namespace ei {

namespace {

class Phi3 final : public ArchModel {
public:
    Phi3(const GgufFile& f, const KernelTable& kt) : hp_(read_hparams(f)) {
        const int64_t d = hp_.n_embd, qw = hp_.q_width(), kvw = hp_.kv_width();
        if (f.find_tensor("rope_factors_long.weight") || f.find_tensor("rope_factors_short.weight"))
            f.fail("tensor 'rope_factors_long.weight'", "LongRoPE scaling (Phi-3 128k) is not supported yet");
        load_decoder_io(f, kt, hp_, w_);
        w_.layers.resize(hp_.n_layer);
        for (int il = 0; il < hp_.n_layer; ++il) {
            DecoderLayer& L = w_.layers[il];
            L.attn_norm = load_f32_vector(f, TensorKind::attn_norm, il, d);
            L.wqkv = load_tensor(f, kt, TensorKind::attn_qkv, il, {d, qw + 2 * kvw}, true);
            L.wo = load_tensor(f, kt, TensorKind::attn_output, il, {qw, d}, true);
            L.ffn_norm = load_f32_vector(f, TensorKind::ffn_norm, il, d);
            L.w_gate_up = load_tensor(f, kt, TensorKind::ffn_up, il, {d, 2 * hp_.n_ff}, true);
            L.w_down = load_tensor(f, kt, TensorKind::ffn_down, il, {hp_.n_ff, d}, true);
        }
    }

    const HParams& hparams() const override { return hp_; }

    void forward(ForwardEnv& env, const ForwardBatch& b) const override {
        decoder_forward(env, b, hp_, w_, DecoderOptions{/*scale_q_first=*/true});
    }

    void rotate_cached_keys(const KernelTable& kt, int64_t, float* rows, int64_t m, int32_t delta) const override {
        decoder_rotate_keys(kt, hp_, rows, m, delta);
    }

private:
    HParams hp_;
    DecoderWeights w_;
};

}  // namespace

std::unique_ptr<ArchModel> load_phi3(const GgufFile& file, const KernelTable& kt) {
    return std::make_unique<Phi3>(file, kt);
}

}  // namespace ei
