// A weight tensor as the forward pass sees it: a view into the mapped file, plus, for the
// types the CPU kernels repack at load (cpu/repack.h), the repacked copy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ei {

struct Tensor {
    const uint8_t* data = nullptr;  // row-major blocks, in the mapping
    uint32_t type = 0;              // GgmlType
    int64_t ne[4] = {1, 1, 1, 1};   // ne[0] = row length, ne[1] = rows
    size_t row_bytes = 0;           // bytes of one row of ne[0] elements
    // The weight repacked into 16-row groups (cpu/repack.h), or null. `data` stays valid (other
    // paths, e.g. an embedding lookup or a GPU upload, read the original layout).
    std::shared_ptr<const uint8_t> packed;
    size_t packed_group_bytes = 0;  // bytes of one 16-row group of `packed`
    // The loader released this tensor's mapped pages (a repacked twin does its matmuls: a tied
    // output), so a lookup of a few rows (embed_tokens) releases what it read again: a page fault
    // there maps a whole large folio of the page cache (hundreds of KiB) into the resident set,
    // and a prompt's tokens would bring most of the table back.
    bool release_after_lookup = false;

    bool present() const { return data != nullptr; }
    int64_t cols() const { return ne[0]; }
    int64_t rows() const { return ne[1]; }
    const uint8_t* row(int64_t r) const { return data + (size_t)r * row_bytes; }
};

}  // namespace ei
