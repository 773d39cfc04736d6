// Context::embed: the hidden states of one input, pooled (arch/pooling.h).
#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/context.h"

namespace ei {

void Context::embed(const int32_t* tokens, int64_t n, Pooling pooling, float* out) {
    if (n <= 0) throw Error("an embedding needs at least one token");
    if (n > n_ctx())
        throw ContextOverflowError("context overflow: an input of " + std::to_string(n) +
                                   " tokens exceeds the context size of " + std::to_string(n_ctx()));
    const int64_t n_vocab = this->n_vocab(), d = model_->hparams().n_embd;
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw Error("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                        " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
    std::vector<float> hidden((size_t)(n * d));  // [n][n_embd] final hidden states
    const ArchModel& arch = model_->arch();
    if (arch.is_encoder()) {
        arch.encode(env_, tokens, n, hidden.data());
    } else {
        // Sequence 0 from empty, and empty again afterwards even when a chunk throws: an
        // embedding leaves nothing behind for a later generation to reuse.
        struct Empty {
            int64_t& past;
            ~Empty() { past = 0; }
        } empty{n_past_};
        n_past_ = 0;
        env_.kv = &kv_;
        for (int64_t done = 0; done < n;) {
            const int64_t chunk = std::min(n_batch_, n - done);
            ForwardBatch b{tokens + done, chunk, done, 0, nullptr, BatchOrder::llama_cpp};
            b.hidden = hidden.data() + done * d;
            arch.forward(env_, b);
            n_past_ += chunk;
            done += chunk;
        }
    }
    pool_hidden(pool_, env_.kt, env_.matmul_scratch, pooling, model_->classifier(), hidden.data(), n, d, out);
}

}  // namespace ei
