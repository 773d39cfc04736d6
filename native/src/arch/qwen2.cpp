// The qwen2 architecture (Qwen 2, Qwen 2.5), as llama.cpp runs it from GGUF: the shared decoder
// (arch/decoder.h) with biases on the Q, K and V projections and neox-mode RoPE.
#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_qwen2(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    LayerConfig config;
    config.rope = file_rope(hp);
    config.rope_neox = true;
    LayerParts parts;
    parts.qkv_bias = true;
    DecoderModel m = load_uniform_decoder(f, kt, hp, parts, config);
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
