// The phi3 architecture (Phi-3 / Phi-3.5 mini), as llama.cpp runs it from GGUF: the shared decoder
// (arch/decoder.h) with one fused QKV projection (attn_qkv: Q, K, V rows in that order), one
// fused gate/up projection (ffn_up: [2 n_ff] rows, the gate half first), neox-mode RoPE over
// rope.dimension_count dims, and Q scaled by 1/sqrt(head_dim) before attention as llama.cpp's
// graph does. Like llama.cpp, the sliding window some configs name is not applied.
//
// LongRoPE (the 128k-context models): per-frequency divisors rope_factors_long / _short, the long
// ones when the context is longer than rope.scaling.original_context_length (llama.cpp's choice,
// made once per context; transformers chooses per sequence length), and cos/sin scaled by
// rope.scaling.attn_factor (read for every architecture, arch/hparams.cpp).
#include <cmath>

#include "arch/arch.h"

namespace ei {

namespace {

class Phi3 final : public ArchModel {
public:
    Phi3(HParams hp, DecoderModel m, const float* factors_long, const float* factors_short, int64_t n_ctx_orig)
        : ArchModel(std::move(hp), std::move(m)),
          factors_long_(factors_long),
          factors_short_(factors_short),
          n_ctx_orig_(n_ctx_orig) {}

    LayerConfig layer_config(int il, int64_t n_ctx) const override {
        LayerConfig c = ArchModel::layer_config(il, n_ctx);
        c.rope.freq_factors = n_ctx > n_ctx_orig_ ? factors_long_ : factors_short_;
        return c;
    }

private:
    const float* factors_long_;   // [n_rot / 2] or nullptr
    const float* factors_short_;  // [n_rot / 2] or nullptr
    int64_t n_ctx_orig_;          // contexts longer than this use the long factors
};

}  // namespace

std::unique_ptr<ArchModel> load_phi3(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    const float* factors_long = load_f32_vector(f, TensorKind::rope_factors_long, -1, hp.n_rot / 2, /*required=*/false);
    const float* factors_short = load_f32_vector(f, TensorKind::rope_factors_short, -1, hp.n_rot / 2, /*required=*/false);
    if (!factors_long != !factors_short)
        f.fail("tensor 'rope_factors_long.weight'", "LongRoPE needs both the long and the short factors");
    LayerConfig config;
    config.rope = file_rope(hp);  // attn_factor: rope.scaling.attn_factor (arch/hparams.cpp)
    config.rope_neox = true;
    config.q_scale = 1.0f / std::sqrt((float)hp.head_dim);
    LayerParts parts;
    parts.fused_qkv = true;
    parts.fused_gate_up = true;
    DecoderModel m = load_uniform_decoder(f, kt, hp, parts, config);
    const int64_t n_ctx_orig = hp.rope_n_ctx_orig;
    return std::make_unique<Phi3>(std::move(hp), std::move(m), factors_long, factors_short, n_ctx_orig);
}

}  // namespace ei
