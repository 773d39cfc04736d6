// What an architecture and a Context tell the OpenCL offload (gpu/offload.h): a layer's host
// weights, the shapes all layers share, and which layers go to which device. Plain structs, so
// that models/arch.h and engine/context.h can include this without the OpenCL runtime.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/tensor.h"

namespace ei::cl {

// One layer's weights on the host (views into the mapping), as the architecture holds them, and
// what differs between layers. The optional norms (nullptr: absent) are Gemma's.
struct HostLayer {
    const float* attn_norm = nullptr;       // [n_embd]
    const Tensor* wq = nullptr;             // [n_embd] -> [n_head * head_dim]
    const Tensor* wk = nullptr;             // [n_embd] -> [n_head_kv * head_dim]
    const Tensor* wv = nullptr;
    const float* q_norm = nullptr;          // [head_dim], per-head RMSNorm of Q (optional)
    const float* k_norm = nullptr;          // [head_dim], of K (optional)
    const Tensor* wo = nullptr;             // [n_head * head_dim] -> [n_embd]
    const float* post_attn_norm = nullptr;  // [n_embd], on the attention output (optional)
    const float* ffn_norm = nullptr;        // [n_embd]
    const Tensor* w_gate = nullptr;         // [n_embd] -> [n_ff]
    const Tensor* w_up = nullptr;
    const Tensor* w_down = nullptr;         // [n_ff] -> [n_embd]
    const float* post_ffn_norm = nullptr;   // [n_embd], on the FFN output (optional)
    float rope_freq_base = 0.0f, rope_freq_scale = 1.0f;  // the layer's rope (the architecture's hparams)
    int64_t window = 0;                     // > 0: sliding-window attention over that many positions
};

// The shapes and choices every offloaded layer shares.
struct LayerDims {
    int64_t n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
    float norm_eps = 0.0f;
    int64_t n_rot = 0;
    const float* rope_factors = nullptr;  // [n_rot / 2] or nullptr
    bool rope_neox = false;               // pairs (i, i + n_rot/2), else (2i, 2i + 1)
    bool gelu = false;                    // GEGLU feed-forward, else SwiGLU
    float attn_scale = 0.0f;              // > 0: Q is scaled by it before attention, which then uses
                                          // scale 1 (Gemma 3); 0: the softmax scale is 1 / sqrt(head_dim)
};

// Where to offload: the layers, the device (its index in `edgeinfer devices`), the OpenCL library
// and the folder for compiled programs (both from Python, which owns paths).
struct OffloadRequest {
    std::vector<int> layers;
    int device = 0;
    std::string library;    // "" = the default libOpenCL
    std::string cache_dir;  // "" = compiled programs in memory only
};

}  // namespace ei::cl
