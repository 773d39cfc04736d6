// The phi3 architecture (Phi-3 / Phi-3.5 mini), as llama.cpp runs it from GGUF: the shared decoder
// (models/decoder.h) with one fused QKV projection (attn_qkv: Q, K, V rows in that order), one
// fused gate/up projection (ffn_up: [2 n_ff] rows, the gate half first), neox-mode RoPE over
// rope.dimension_count dims, and Q scaled by 1/sqrt(head_dim) before attention as llama.cpp's
// graph does. Like llama.cpp, the sliding window some configs name is not applied.
//
// LongRoPE (the 128k-context models): per-frequency divisors rope_factors_long / _short, the long
// ones when the context is longer than rope.scaling.original_context_length (llama.cpp's choice,
// made once per context; transformers chooses per sequence length), and cos/sin scaled by
// rope.scaling.attn_factor.
#include "common/error.h"
#include "models/arch.h"
#include "models/decoder.h"

namespace ei {

namespace {

class Phi3 final : public ArchModel {
public:
    Phi3(const GgufFile& f, const KernelTable& kt) : hp_(read_hparams(f)) {
        const int64_t d = hp_.n_embd, qw = hp_.q_width(), kvw = hp_.kv_width();
        const std::string a = hp_.arch + ".";
        load_decoder_io(f, kt, hp_, w_);
        factors_long_ = load_f32_vector(f, TensorKind::rope_factors_long, -1, hp_.n_rot / 2, /*required=*/false);
        factors_short_ = load_f32_vector(f, TensorKind::rope_factors_short, -1, hp_.n_rot / 2, /*required=*/false);
        if (!factors_long_ != !factors_short_)
            f.fail("tensor 'rope_factors_long.weight'", "LongRoPE needs both the long and the short factors");
        n_ctx_orig_ = f.get_int(a + "rope.scaling.original_context_length", hp_.n_ctx_train);
        attn_factor_ = (float)f.get_float(a + "rope.scaling.attn_factor", 1.0);
        if (!(attn_factor_ > 0.0f)) f.fail(a + "rope.scaling.attn_factor", "must be positive");
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
        DecoderOptions o;
        o.scale_q_first = true;
        o.rope_factors = env.kv.n_ctx() > n_ctx_orig_ ? factors_long_ : factors_short_;
        o.rope_attn_factor = attn_factor_;
        decoder_forward(env, b, hp_, w_, o);
    }

    void rotate_cached_keys(const KernelTable& kt, int64_t, float* rows, int64_t m, int32_t delta) const override {
        if (factors_long_) throw Error("context shift is not supported for Phi-3 with LongRoPE yet");
        decoder_rotate_keys(kt, hp_, rows, m, delta);
    }

private:
    HParams hp_;
    DecoderWeights w_;
    const float* factors_long_ = nullptr;   // [n_rot / 2] or nullptr
    const float* factors_short_ = nullptr;  // [n_rot / 2] or nullptr
    int64_t n_ctx_orig_ = 0;                // contexts longer than this use the long factors
    float attn_factor_ = 1.0f;
};

}  // namespace

std::unique_ptr<ArchModel> load_phi3(const GgufFile& file, const KernelTable& kt) {
    return std::make_unique<Phi3>(file, kt);
}

}  // namespace ei
