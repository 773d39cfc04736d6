// The qwen2 architecture (Qwen 2, Qwen 2.5), as llama.cpp runs it from GGUF: the shared decoder
// (arch/decoder.h) with biases on the Q, K and V projections and neox-mode RoPE.
#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_qwen2(const GgufFile& f, const KernelTable& kt) {
    LayerParts parts;
    parts.qkv_bias = true;
    return load_neox_decoder(f, kt, parts);
}

}  // namespace ei
