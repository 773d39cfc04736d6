#include "model/model.h"

#include <chrono>

#include "cpu/kernels.h"

namespace ei {

Model::Model(const std::string& path, FloatOrder order) : Model(path, kernels_for(selected_isa(), order)) {}

Model::Model(const std::string& path, const KernelTable& kernels) : kernels_(&kernels) {
    const auto start = std::chrono::steady_clock::now();
    file_ = std::make_shared<GgufFile>(path);
    vocab_ = std::make_unique<Vocab>(*file_);
    arch_ = load_architecture(*file_, *kernels_);
    pooling_ = file_pooling(*file_, Pooling::none);
    classifier_ = load_classifier_head(*file_, *kernels_, hparams().n_embd, !arch_->is_encoder());
    projection_ = load_dense_projection(*file_, *kernels_, hparams().n_embd);
    if (vocab_->n_tokens() > hparams().n_vocab)
        file_->fail("tokenizer.ggml.tokens", "has " + std::to_string(vocab_->n_tokens()) +
                                                 " entries but the embedding has only " +
                                                 std::to_string(hparams().n_vocab) + " rows");
    load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int64_t Model::n_params() const {
    int64_t n = 0;
    for (const GgufTensor& t : file_->tensors()) n += t.n_elements();
    return n;
}

void check_model_file(const std::string& path) {
    // Without packed kernels the loader binds every weight where it is mapped (arch/load_tensor.cpp),
    // after the same checks.
    KernelTable unpacked = kernels_for(selected_isa(), default_float_order());
    for (TypeKernels& k : unpacked.types) k.gemm_16row_groups = nullptr;
    const Model checked(path, unpacked);
}

}  // namespace ei
