// The qwen3 architecture (dense Qwen 3), as llama.cpp runs it from GGUF: the shared decoder
// (arch/decoder.h) with per-head RMS norms on Q and K before neox-mode RoPE, no biases.
#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_qwen3(const GgufFile& f, const KernelTable& kt) {
    LayerParts parts;
    parts.qk_norm = true;
    return load_neox_decoder(f, kt, parts);
}

}  // namespace ei
