// The llama architecture (Llama 2/3, Mistral, SmolLM, TinyLlama), as llama.cpp runs it from GGUF:
// the shared decoder (arch/decoder.h) with the plain layer and llama.cpp's "normal" RoPE
// (adjacent pairs), its angles divided by rope_freqs where the file has them (Llama 3.1).
#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_llama(const GgufFile& f, const KernelTable& kt) {
    HParams hp = read_hparams(f);
    LayerConfig config;
    config.rope = file_rope(hp, load_f32_vector(f, TensorKind::rope_freqs, -1, hp.n_rot / 2, /*required=*/false));
    DecoderModel m = load_uniform_decoder(f, kt, hp, LayerParts{}, config);
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
