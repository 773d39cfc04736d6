// What every architecture is: hyper-parameters and a decoder (arch/decoder.h) whose layers are
// the one layer of layers/decoder_layer.h, with the weights and per-layer settings its file
// loads. One file per architecture fills them in, plus one line in arch/registry.cpp; the
// forward pass, context shift and offload are shared, so a new architecture brings no code of
// its own for them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "layers/cpu_layer_ops.h"
#include "layers/device_layers.h"
#include "arch/hparams.h"
#include "cpu/tensor.h"
#include "arch/tensor_names.h"
#include "arch/decoder.h"

namespace ei {

// Everything a forward pass computes with; owned by the Context, reused across calls.
struct ForwardEnv {
    ThreadPool& pool;
    const KernelTable& kt;
    KvCache* kv;   // the cache of the sequence being decoded (Context::decode points it)
    MatmulScratch matmul_scratch;
    std::vector<std::vector<float>> buffers;
    // Layers on another backend (layers/device_layers.h), or nullptr: a forward runs each range
    // of them there with one call, and every other layer here.
    DeviceLayers* device = nullptr;
    // Where every matmul's input is summed (`edgeinfer imatrix`), or nullptr; every layer then
    // runs here.
    ActivationStats* activation_stats = nullptr;

    // A float buffer of at least n values in slot `slot` (contents undefined).
    float* buffer(size_t slot, size_t n) {
        if (buffers.size() <= slot) buffers.resize(slot + 1);
        if (buffers[slot].size() < n) buffers[slot].resize(n);
        return buffers[slot].data();
    }
};

// The activations of a pass over n rows (layers/decoder_layer.h), in env's buffers 0..8.
LayerActs<float*> layer_activations(ForwardEnv& env, const LayerShapes& s, int64_t n);

struct ForwardBatch {
    const int32_t* tokens;  // [n]
    int64_t n;
    int64_t pos0;           // position of tokens[0]; the cache holds positions < pos0
    int64_t first_logit;    // logits for tokens first_logit..n-1 (n: none, the batch only fills the cache)
    float* logits;          // [n - first_logit][n_vocab]
    BatchOrder order = BatchOrder::llama_cpp;  // how the rows are computed (cpu/batch_order.h)
    // A batch of several sequences: the runs of rows and their caches (layers/cpu_layer_ops.h);
    // then logits are for the rows listed in logit_rows (ascending), not from first_logit on.
    const SequenceRun* runs = nullptr;
    size_t n_runs = 0;
    const int64_t* logit_rows = nullptr;
    int64_t n_logit_rows = 0;
    // Embeddings (llama.cpp's --embeddings): when set, the rows' final-normed hidden states go here,
    // [n - first_logit][n_embd], and no logits are computed.
    float* hidden = nullptr;
};

class ArchModel {
public:
    ArchModel(HParams hp, DecoderModel decoder) : hp_(std::move(hp)), decoder_(std::move(decoder)) {}
    virtual ~ArchModel() = default;

    const HParams& hparams() const { return hp_; }
    const DecoderModel& decoder() const { return decoder_; }
    // How layer `il` ropes and attends in a context of n_ctx positions (LongRoPE chooses its
    // factors by the context's length).
    virtual LayerConfig layer_config(int il, int64_t n_ctx) const { return decoder_.configs.at(il); }

    void forward(ForwardEnv& env, const ForwardBatch& batch) const;

    // An encoder (BERT: arch/bert.cpp) has no decoder layers and no cache: each input is one
    // bidirectional pass over all its tokens, and forward() refuses it.
    virtual bool is_encoder() const { return false; }
    // The encoder's final hidden states [n][n_embd] of tokens[0..n) at positions 0..n-1.
    virtual void encode(ForwardEnv& env, const int32_t* tokens, int64_t n, float* hidden) const;
    // Several inputs in one pass: sequence s is tokens[starts[s]..starts[s + 1]) at positions from
    // 0, attending only to itself; hidden is [starts[n_seq]][n_embd]. Each sequence's rows must be
    // the floats encode() gives it alone. This default encodes them one by one; an encoder that
    // can pack them (bert.cpp) runs its matmuls over all their rows at once.
    virtual void encode_packed(ForwardEnv& env, const int32_t* tokens, const int64_t* starts, int64_t n_seq,
                               float* hidden) const;
    // Context shift: m cached K rows of `layer` ([m][n_head_kv][head_dim] floats, rotated for
    // their old positions) rotated further by `delta` positions, in place, with the layer's own
    // RoPE (none on an unroped layer). Refused (Error) where a rotation cannot move a key exactly
    // (a RoPE attention factor).
    void rotate_cached_keys(const KernelTable& kt, int64_t layer, float* rows, int64_t m, int32_t delta,
                            int64_t n_ctx) const;

private:
    HParams hp_;
    DecoderModel decoder_;
};

// A decoder whose layers are all alike (`parts`), roped by the file's RoPE in neox mode and
// attending as llama does: Qwen 2 and Qwen 3 are this with different parts.
std::unique_ptr<ArchModel> load_neox_decoder(const GgufFile& f, const KernelTable& kt, const LayerParts& parts);
// Gemma 3's decoder (arch/gemma3.cpp): its weights, and each layer local (window = the file's
// sliding_window) or global. EmbeddingGemma (arch/gemma_embedding.cpp) runs it bidirectionally.
DecoderModel load_gemma3_decoder(const GgufFile& f, const KernelTable& kt, HParams& hp);

// Loads the architecture named by general.architecture; throws Error for an unknown one.
std::unique_ptr<ArchModel> load_architecture(const GgufFile& file, const KernelTable& kt);
// Names of the registered architectures.
std::vector<std::string> supported_architectures();

// Looks up a weight and checks its shape (ne order; -1 = any) and that the kernels can use it
// (`for_matmul`: needs vec_dot, else to_float). Missing and !required -> an absent Tensor.
Tensor load_tensor(const GgufFile& file, const KernelTable& kt, TensorKind kind, int layer,
                   std::vector<int64_t> shape, bool for_matmul, bool required = true);
// A 1-D F32 tensor (norm weights, rope factors) as a float pointer into the mapping.
const float* load_f32_vector(const GgufFile& file, TensorKind kind, int layer, int64_t n, bool required = true);
// An F32 tensor of `rows` rows of `width` floats (per-expert biases: [n_expert][width]).
const float* load_f32_rows(const GgufFile& file, TensorKind kind, int layer, int64_t width, int64_t rows,
                           bool required = true);

}  // namespace ei
