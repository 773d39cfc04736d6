// The qwen3 architecture (dense Qwen 3), as llama.cpp runs it from GGUF: the shared decoder
// (arch/decoder.h) with per-head RMS norms on Q and K before neox-mode RoPE, no biases.
#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_qwen3(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    LayerConfig config;
    config.rope = file_rope(hp);
    config.rope_neox = true;
    LayerParts parts;
    parts.qk_norm = true;
    DecoderModel m = load_uniform_decoder(f, kt, hp, parts, config);
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
