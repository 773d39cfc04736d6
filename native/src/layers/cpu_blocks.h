// The CPU building blocks of a layer (layers/cpu_layer_ops.h runs the layer with them). Each mirrors the numerics
// of the corresponding ggml CPU op (so that our logits track llama.cpp's), and says where.
#pragma once
#include <cstdint>

#include "cpu/batch_order.h"
#include "common/thread_pool.h"
#include "cpu/kernels.h"
#include "kv/kv_cache.h"
#include "layers/params.h"
#include "cpu/tensor.h"

namespace ei {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, for n rows of width d. Sum of squares in double,
// then scale and weight applied as two float multiplies (ggml: rms_norm, then mul).
void rms_norm(const float* x, const float* w, float* out, int64_t n, int64_t d, float eps);

// Row t of an embedding table (any type with a to_float) into out[t].
void embed_tokens(const KernelTable& kt, const Tensor& table, const int32_t* tokens, int64_t n, float* out);

// Rotary position embedding in place on the first n_rot dims of each head (layers/params.h),
// llama.cpp's "normal" mode (pairs of adjacent values); x: [n][n_heads][head_dim], positions pos[t].
void rope_norm(const KernelTable& kt, float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* pos,
               const RopeParams& p);
// The same angles in llama.cpp's "neox" mode (GPT-NeoX, Gemma, Qwen): dims i and i + n_rot/2 form a pair.
void rope_neox(const KernelTable& kt, float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* pos,
               const RopeParams& p);

// Causal attention of n query rows over an F16 KV cache (ggml's CPU flash-attention with an F16
// cache: Q rounded to F16, online softmax, V accumulated in F16).
//   q:   [n][n_head][head_dim] floats, already roped; query t sits at position pos0 + t
//   k,v: [n_kv_total][n_head_kv][head_dim] F16 rows for positions 0 .. pos0 + n - 1
//   out: [n][n_head][head_dim]
// s.window > 0 limits each query to the last `window` positions (sliding-window layers).
// In FloatOrder::fast (on tables with the tiled kernel), batches of fewer than kAttnTileMinRows
// rows go through it instead, over fixed 64-position spans merged in order (F32 throughout):
// each row's floats independent of the batch, as the one-row kernel's are.
void attention_f16(ThreadPool& pool, const KernelTable& kt, const float* q, int64_t n, int64_t pos0,
                   const uint16_t* k, const uint16_t* v, const AttentionShape& s, float* out);

// attention_f16's contract over layer `layer` of a KV cache of any type: an F16 cache goes to
// attention_f16 (llama.cpp's exact path); a cache with a Q8_0/Q4_0 K to the span kernel where
// the table has one (kt.ops.attn_kvq_span: grouped heads, integer scores, split-KV), else to
// ggml's one-row kernel for quantized K/V (kt.ops.attn_kvq_row); both read the blocks in place.
// A rotated K (KvCache::k_rotated) gets Q rotated alike first. With BatchOrder::per_row each query
// row is computed as a one-row batch at its position would compute it (the split of positions
// into spans, the tiled kernel's threshold). (layers/cpu_attention.cpp)
void attention_cached(ThreadPool& pool, const KernelTable& kt, const float* q, int64_t n, int64_t pos0,
                      const KvCache& kv, int64_t layer, const AttentionShape& s, float* out,
                      BatchOrder order = BatchOrder::llama_cpp);

// out[i] = silu(gate[i]) * up[i] over n values (in place allowed: out may equal gate).
void swiglu(const KernelTable& kt, const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu_tanh(gate[i]) * up[i] over n values, through ggml's F16 GELU table (in place allowed).
void geglu(const KernelTable& kt, const float* gate, const float* up, float* out, int64_t n);

// gpt-oss's clamped SwiGLU (ggml_swiglu_oai with alpha 1.702, limit 7, its scalar loop):
// x = min(gate[i], 7), y = clamp(up[i], -7, 7), out[i] = x / (1 + expf(-1.702 x)) * (y + 1)
// (in place allowed: out may equal gate).
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);

// x[i] *= s (ggml_scale: one float multiply a value)
void scale_inplace(float* x, float s, int64_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace ei
