// The granite architecture (IBM Granite 3.x dense), as llama.cpp runs it from GGUF: the llama
// decoder (arch/decoder.h, normal-mode RoPE, rope_freqs where the file has them) with four
// multipliers from the file:
//
//   granite.embedding_scale   the embeddings are scaled by it              (optional; 0: none)
//   granite.attention.scale   the attention scores' scale, for 1/sqrt(hd)  (optional; 0: 1/sqrt(hd))
//   granite.residual_scale    each sub-block's output before its add       (optional; 0: none)
//   granite.logit_scale       the logits are divided by it                 (required, as llama.cpp has it)
//
// and granite.rope.scaling.finetuned, which llama.cpp reads as "the layers are roped" (default
// true; false: no layer is).
#include <cmath>
#include <string>

#include "arch/arch.h"

namespace ei {

namespace {
// A multiplier: finite and positive; an optional one may be absent or 0 (llama.cpp's "not set").
float multiplier(const GgufFile& f, const std::string& key, bool required = false) {
    if (required && !f.find(key)) f.fail(key, "is missing");
    const double v = f.get_float(key, 0.0);
    if (!(std::isfinite(v) && (v > 0.0 || (v == 0.0 && !required))))
        f.fail(key, required ? "must be positive" : "must be positive (or 0: not applied)");
    return (float)v;
}
}  // namespace

std::unique_ptr<ArchModel> load_granite(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    const std::string a = hp.arch + ".";
    LayerConfig config;
    config.rope = file_rope(hp, load_f32_vector(f, TensorKind::rope_freqs, -1, hp.n_rot / 2, /*required=*/false));
    config.nope = !f.get_bool(a + "rope.scaling.finetuned", true);
    config.attn_scale = multiplier(f, a + "attention.scale");
    config.residual_scale = multiplier(f, a + "residual_scale");
    DecoderModel m = load_uniform_decoder(f, kt, hp, LayerParts{}, config);
    m.embed_scale = multiplier(f, a + "embedding_scale");
    m.logit_scale = multiplier(f, a + "logit_scale", /*required=*/true);
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
