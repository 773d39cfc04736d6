// The smollm3 architecture (SmolLM3), as llama.cpp runs it from GGUF: the llama decoder
// (arch/decoder.h, normal-mode RoPE over Q/K rows the converter permuted) except that every
// fourth layer (il + 1 a multiple of 4) skips RoPE altogether (NoPE layers).
//
// The interval is llama.cpp's n_no_rope_layer_step, fixed at 4 in its loader: no GGUF key carries
// it or per-layer flags, so the converter refuses a config whose no_rope_layers differ. Its graph
// passes no rope factors, so a rope_freqs tensor is not used here either.
#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_smollm3(const GgufFile& f, const KernelTable& kt) {
    constexpr int kNoRopeLayerStep = 4;  // llama.cpp's n_no_rope_layer_step for smollm3
    HParams hp = read_hparams(f);
    LayerConfig config;
    config.rope = file_rope(hp);
    DecoderModel m = load_uniform_decoder(f, kt, hp, LayerParts{}, config);
    for (int il = kNoRopeLayerStep - 1; il < hp.n_layer; il += kNoRopeLayerStep) m.configs[il].nope = true;
    return std::make_unique<ArchModel>(std::move(hp), std::move(m));
}

}  // namespace ei
