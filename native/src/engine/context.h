// A Context is one conversation's state over a Model: the KV cache, the scratch buffers, the
// thread pool and the logits of the last decode. `decode` is the one native call per prompt
// chunk or generated token; nothing inside it calls back into Python.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace ei {

class Context {
public:
    // n_ctx: positions the KV cache holds; n_threads <= 0: physical cores; n_batch: tokens per
    // forward chunk (bounds scratch memory; long prompts are split into chunks).
    Context(std::shared_ptr<const Model> model, int64_t n_ctx, int n_threads, int64_t n_batch = 512);

    // Runs tokens[0..n) at positions n_past() .. n_past()+n-1 and keeps their K/V. Afterwards
    // logits() holds one row per token if all_logits, else the last token's row.
    // Throws ContextOverflowError (nothing changed) if the tokens do not fit, Error for a bad id.
    void decode(const int32_t* tokens, int64_t n, bool all_logits);

    // Logits of the last decode: [n_logit_rows][n_vocab]. The buffer is shared so a caller's
    // zero-copy view stays valid after later decodes (which use a fresh buffer when they must grow).
    const std::shared_ptr<std::vector<float>>& logits_buffer() const { return logits_; }
    int64_t n_logit_rows() const { return n_logit_rows_; }
    int64_t n_vocab() const { return model_->hparams().n_vocab; }

    int64_t n_past() const { return n_past_; }
    // Forgets positions >= n (for reusing a common prefix). n is clamped to [0, n_past].
    void truncate(int64_t n);

    int64_t n_ctx() const { return kv_.n_ctx(); }
    int64_t n_batch() const { return n_batch_; }
    int n_threads() const { return pool_.size(); }
    size_t kv_bytes() const { return kv_.bytes(); }
    const Model& model() const { return *model_; }

private:
    std::shared_ptr<const Model> model_;
    int64_t n_batch_;
    ThreadPool pool_;
    KvCache kv_;
    ForwardEnv env_;
    std::shared_ptr<std::vector<float>> logits_;
    int64_t n_logit_rows_ = 0;
    int64_t n_past_ = 0;
};

}  // namespace ei
