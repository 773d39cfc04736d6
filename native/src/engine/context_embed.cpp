// Context::embed: the hidden states of inputs, pooled (arch/pooling.h).
#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/context.h"

namespace ei {

void Context::embed(const int32_t* tokens, int64_t n, Pooling pooling, float* out) {
    embed(&tokens, &n, 1, pooling, &out);
}

void Context::embed(const int32_t* const* tokens, const int64_t* lens, int64_t count, Pooling pooling,
                    float* const* outs) {
    const int64_t n_vocab = this->n_vocab(), d = model_->hparams().n_embd;
    for (int64_t i = 0; i < count; ++i) {
        const int64_t n = lens[i];
        const std::string which = count > 1 ? "input " + std::to_string(i) + ": " : "";
        if (n <= 0) throw Error(which + "an embedding needs at least one token");
        if (n > n_ctx())
            throw ContextOverflowError(which + "context overflow: an input of " + std::to_string(n) +
                                       " tokens exceeds the context size of " + std::to_string(n_ctx()));
        for (int64_t t = 0; t < n; ++t)
            if (tokens[i][t] < 0 || tokens[i][t] >= n_vocab)
                throw Error(which + "token id " + std::to_string(tokens[i][t]) + " at index " + std::to_string(t) +
                            " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
    }
    const ArchModel& arch = model_->arch();
    std::vector<float> hidden;  // [tokens of the pass][n_embd] final hidden states
    if (arch.is_encoder()) {
        std::vector<int32_t> packed;
        std::vector<int64_t> starts;
        for (int64_t first = 0; first < count;) {
            // Consecutive inputs while they fit n_batch tokens together (at least one).
            int64_t last = first, total = lens[first];
            while (last + 1 < count && total + lens[last + 1] <= n_batch_) total += lens[++last];
            packed.clear();
            starts.assign(1, 0);
            for (int64_t i = first; i <= last; ++i) {
                packed.insert(packed.end(), tokens[i], tokens[i] + lens[i]);
                starts.push_back((int64_t)packed.size());
            }
            hidden.resize((size_t)(total * d));
            arch.encode_packed(env_, packed.data(), starts.data(), last - first + 1, hidden.data());
            for (int64_t i = first; i <= last; ++i)
                pool_hidden(pool_, env_.kt, env_.matmul_scratch, pooling, model_->classifier(), model_->projection(),
                            hidden.data() + starts[i - first] * d, lens[i], d, outs[i]);
            first = last + 1;
        }
        return;
    }
    // A decoder: sequence 0 from empty, and empty again afterwards even when a chunk throws: an
    // embedding leaves nothing behind for a later generation to reuse.
    struct Empty {
        int64_t& past;
        ~Empty() { past = 0; }
    } empty{n_past_};
    env_.kv = &kv_;
    for (int64_t i = 0; i < count; ++i) {
        const int64_t n = lens[i];
        hidden.resize((size_t)(n * d));
        n_past_ = 0;
        for (int64_t done = 0; done < n;) {
            const int64_t chunk = std::min(n_batch_, n - done);
            ForwardBatch b{tokens[i] + done, chunk, done, 0, nullptr, BatchOrder::llama_cpp};
            b.hidden = hidden.data() + done * d;
            arch.forward(env_, b);
            n_past_ += chunk;
            done += chunk;
        }
        pool_hidden(pool_, env_.kt, env_.matmul_scratch, pooling, model_->classifier(), model_->projection(),
                    hidden.data(), n, d, outs[i]);
    }
}

}  // namespace ei
