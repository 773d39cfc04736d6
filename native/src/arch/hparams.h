// Hyper-parameters every decoder-only architecture shares, read from the GGUF `<arch>.*` keys.
// Architecture files add their own fields next to these (arch/<arch>.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace ei {

// The RoPE scalings the core implements (<arch>.rope.scaling.type); any other is refused at load.
// longrope: Phi-3's per-frequency factor tensors (arch/phi3.cpp), the only architecture with them.
enum class RopeScaling { none, linear, yarn, longrope };
const char* rope_scaling_name(RopeScaling s);

struct HParams {
    std::string arch;        // general.architecture
    int64_t n_vocab = 0;     // rows of token_embd
    int64_t n_ctx_train = 0; // <arch>.context_length, or YaRN's original context times its factor
                             // where that is larger
    int64_t n_embd = 0;      // <arch>.embedding_length
    int64_t n_layer = 0;     // <arch>.block_count
    int64_t n_head = 0;      // <arch>.attention.head_count
    int64_t n_head_kv = 0;   // <arch>.attention.head_count_kv (defaults to n_head); where the
                             // file gives one per layer, the attention layers' (all alike)
    std::vector<int32_t> n_head_kv_layer;  // that array, [n_layer], if the file has one: 0 marks
                                           // a layer without attention (LFM2's convolutions)
    int64_t head_dim = 0;    // <arch>.attention.key_length (defaults to n_embd / n_head)
    int64_t n_ff = 0;        // <arch>.feed_forward_length
    float norm_eps = 1e-5f;  // <arch>.attention.layer_norm_rms_epsilon
    int64_t n_rot = 0;       // <arch>.rope.dimension_count (defaults to head_dim)
    float rope_freq_base = 10000.0f;  // <arch>.rope.freq_base
    float rope_freq_base_swa = 10000.0f;  // <arch>.rope.freq_base_swa: the sliding-window layers'
                                          // base (Gemma 3's local layers, which are never scaled)
    RopeScaling rope_scaling = RopeScaling::none;  // <arch>.rope.scaling.type
    float rope_freq_scale = 1.0f;     // 1 / <arch>.rope.scaling.factor (linear and YaRN scaling)
    float rope_attn_factor = 1.0f;    // what cos and sin are scaled by: <arch>.rope.scaling.attn_factor,
                                      // times YaRN's magnitude correction (llama_context's yarn_attn_factor)
    // YaRN (rope_scaling == yarn; llama.cpp's defaults where the file has no yarn_* key)
    int64_t rope_n_ctx_orig = 0;      // <arch>.rope.scaling.original_context_length (default n_ctx_train)
    float yarn_ext_factor = 0.0f;     // <arch>.rope.scaling.yarn_ext_factor: 1 with YaRN, else 0
    float yarn_beta_fast = 32.0f;     // <arch>.rope.scaling.yarn_beta_fast
    float yarn_beta_slow = 1.0f;      // <arch>.rope.scaling.yarn_beta_slow
    // Mixture of experts (all 0 for a dense feed-forward).
    int64_t n_expert = 0;       // <arch>.expert_count: experts in each layer's feed-forward
    int64_t n_expert_used = 0;  // <arch>.expert_used_count: experts each token is routed to
    int64_t n_ff_exp = 0;       // <arch>.expert_feed_forward_length (llama.cpp's default:
                                // n_ff / n_expert_used)
    int64_t conv_l_cache = 0;   // <arch>.shortconv.l_cache: taps of LFM2's short convolutions
                                // (0: no convolution layers)

    // Whether layer il attends (false: LFM2's convolution layers, head_count_kv 0).
    bool has_attention(int il) const { return n_head_kv_layer.empty() || n_head_kv_layer[(size_t)il] > 0; }

    int64_t q_width() const { return n_head * head_dim; }   // width of Q and of the attention output
    int64_t kv_width() const { return n_head_kv * head_dim; } // width of one K (or V) row
};

// Reads the shared keys; throws FormatError for missing/invalid required ones and for
// inconsistent values (zero heads, head count not dividing, ...).
HParams read_hparams(const GgufFile& file);

}  // namespace ei
