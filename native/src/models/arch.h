// What an architecture provides: its hyper-parameters, its weights (views into the mapping) and a
// forward pass over a batch of tokens. One file per architecture implements this, plus one line
// in models/registry.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "gguf/gguf.h"
#include "gpu/offload_types.h"
#include "kv/kv_cache.h"
#include "model/hparams.h"
#include "model/tensor.h"
#include "model/tensor_names.h"

namespace ei {

namespace cl {
class Offload;
}

// Everything a forward pass computes with; owned by the Context, reused across calls.
struct ForwardEnv {
    ThreadPool& pool;
    const KernelTable& kt;
    KvCache& kv;
    MatmulScratch matmul_scratch;
    std::vector<std::vector<float>> buffers;
    // Layers on an OpenCL device (gpu/offload.h), or nullptr: a forward runs each range of
    // offloaded layers there with one call, and every other layer here.
    cl::Offload* offload = nullptr;

    // A float buffer of at least n values in slot `slot` (contents undefined).
    float* buffer(size_t slot, size_t n) {
        if (buffers.size() <= slot) buffers.resize(slot + 1);
        if (buffers[slot].size() < n) buffers[slot].resize(n);
        return buffers[slot].data();
    }
};

struct ForwardBatch {
    const int32_t* tokens;  // [n]
    int64_t n;
    int64_t pos0;           // position of tokens[0]; the cache holds positions < pos0
    int64_t first_logit;    // logits for tokens first_logit..n-1 (n: none, the batch only fills the cache)
    float* logits;          // [n - first_logit][n_vocab]
};

class ArchModel {
public:
    virtual ~ArchModel() = default;
    virtual const HParams& hparams() const = 0;
    virtual void forward(ForwardEnv& env, const ForwardBatch& batch) const = 0;
    // Context shift: m cached K rows of `layer` ([m][n_head_kv][head_dim] floats, rotated for
    // their old positions) rotated further by `delta` positions, in place, with the layer's own
    // RoPE mode and parameters. Architectures that cannot shift keep this default.
    virtual void rotate_cached_keys(const KernelTable& kt, int64_t layer, float* rows, int64_t m,
                                    int32_t delta) const;
    // OpenCL offload: layer `layer`'s weights and the shared shapes, for an architecture whose
    // forward runs offloaded ranges (env.offload). Architectures that cannot keep this default.
    virtual bool offloadable_layer(int /*layer*/, cl::HostLayer* /*w*/, cl::LayerDims* /*dims*/) const {
        return false;
    }
};

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

}  // namespace ei
