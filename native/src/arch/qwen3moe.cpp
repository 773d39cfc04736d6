// The qwen3moe architecture (Qwen 3 mixture of experts: Qwen3-30B-A3B, Qwen3-235B-A22B), as
// llama.cpp runs it from GGUF: dense Qwen 3's attention (arch/qwen3.cpp) with a mixture-of-experts
// feed-forward in every layer (layers/decoder_layer.h, ExpertShape): softmax router over
// expert_count experts, the expert_used_count most probable per token, their weights always
// renormalized (llama.cpp passes norm_w = true for this architecture whatever the file says),
// each a SwiGLU of expert_feed_forward_length. No shared expert (that is qwen2moe).
#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_qwen3moe(const GgufFile& f, const KernelTable& kt) {
    LayerParts parts;
    parts.qk_norm = true;
    parts.experts = true;
    return load_neox_decoder(f, kt, parts);
}

}  // namespace ei
