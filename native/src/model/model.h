// A loaded model: the mapped GGUF file, its vocabulary and its architecture's weights (views into
// the mapping). Immutable after loading; any number of Contexts may share one.
#pragma once
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "arch/arch.h"
#include "arch/pooling.h"
#include "cpu/kernels.h"
#include "vocab/vocab.h"

namespace ei {

class Model {
public:
    // Opens and validates the file, builds the vocabulary and binds the weights (repacked where
    // the kernel table of the selected ISA in `order` has packed kernels for their type).
    // Throws FormatError for a malformed file, Error for an unsupported one.
    explicit Model(const std::string& path, FloatOrder order = default_float_order());
    // The same with the given table, which must outlive the model.
    Model(const std::string& path, const KernelTable& kernels);

    const std::shared_ptr<GgufFile>& file() const { return file_; }
    const Vocab& vocab() const { return *vocab_; }
    const ArchModel& arch() const { return *arch_; }
    const HParams& hparams() const { return arch_->hparams(); }
    // The kernels every Context of this model computes with (its weights are laid out for them).
    const KernelTable& kernels() const { return *kernels_; }
    int64_t n_params() const;   // elements over all tensors
    // How an embedding pools the hidden states: the file's <arch>.pooling_type, else none (as
    // llama.cpp); and the classification head of a reranker (absent for others).
    Pooling pooling() const { return pooling_; }
    const ClassifierHead& classifier() const { return classifier_; }
    // The Dense projections after pooling (absent for most), and the floats of an embedding.
    const DenseProjection& projection() const { return projection_; }
    int64_t n_embd_out() const { return projection_.n_out(hparams().n_embd); }
    double load_ms() const { return load_ms_; }

private:
    const KernelTable* kernels_;
    std::shared_ptr<GgufFile> file_;
    std::unique_ptr<Vocab> vocab_;
    std::unique_ptr<ArchModel> arch_;
    Pooling pooling_ = Pooling::none;
    ClassifierHead classifier_;
    DenseProjection projection_;
    double load_ms_ = 0;
};

// Throws what loading `path` would (a malformed file, a tensor missing or of the wrong shape or
// type, a vocabulary that cannot be built), without repacking the weights (the quantized
// matrices stay unread in the mapping): the verdict of `edgeinfer info`, at the cost of the
// metadata, the vocabulary and the small F32 vectors.
void check_model_file(const std::string& path);

}  // namespace ei
