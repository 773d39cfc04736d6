// How the rows of a batch are computed. Matmul and attention kernels sum a row's floats in an
// order that can depend on how many rows are in the batch (llama.cpp's GEMMs and tiled attention
// take over from its per-row kernels at some batch sizes, and split work differently).
#pragma once

namespace ei {

enum class BatchOrder {
    // llama.cpp's order for a batch of this size: a prompt's logits are llama.cpp's bits.
    llama_cpp,
    // Every row exactly as a batch of that one row computes it: a token decoded with others
    // (parallel sequences, drafted tokens being verified) gets the logits and the cache rows it
    // gets decoded alone, so batching never changes what is generated.
    per_row,
};

}  // namespace ei
