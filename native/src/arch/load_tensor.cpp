// Weight lookup with shape and kernel checks, shared by every architecture.
#include <string>

#include "common/error.h"
#include "common/mmap.h"
#include "cpu/repack.h"
#include "arch/arch.h"

namespace ei {

namespace {
std::string shape_str(const int64_t* ne, size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}
}  // namespace

Tensor load_tensor(const GgufFile& file, const KernelTable& kt, TensorKind kind, int layer,
                   std::vector<int64_t> shape, bool for_matmul, bool required) {
    const std::string name = tensor_name(kind, layer);
    const GgufTensor* gt = file.find_tensor(name);
    Tensor t;
    if (!gt) {
        if (required) file.fail("tensor '" + name + "'", "is missing");
        return t;
    }
    bool ok = gt->n_dims <= shape.size() || gt->n_dims == 0;
    for (size_t i = 0; ok && i < 4; ++i) {
        const int64_t want = i < shape.size() ? shape[i] : 1;
        if (want >= 0 && gt->ne[i] != want) ok = false;
    }
    if (!ok) {
        std::vector<int64_t> want(shape);
        file.fail("tensor '" + name + "'", "has shape " + shape_str(gt->ne, gt->n_dims ? gt->n_dims : 1) +
                                               ", expected " + shape_str(want.data(), want.size()));
    }
    const TypeKernels& k = kt.types[gt->type];
    if (for_matmul ? !k.vec_dot : !k.to_float)
        file.fail("tensor '" + name + "'", std::string("has type ") + type_info(gt->type).name +
                                               ", which this version cannot compute with yet");
    t.data = gt->data;
    t.type = gt->type;
    for (int i = 0; i < 4; ++i) t.ne[i] = gt->ne[i];
    t.row_bytes = row_bytes(gt->type, gt->ne[0]);
    // Types this table multiplies faster in 16-row groups are repacked once here (cpu/repack.h);
    // the mapped pages they were read from then leave the resident set. A stack of matrices (MoE
    // experts, ne[2] of them) is repacked matrix by matrix, its groups end to end
    // (stacked_matrix).
    if (for_matmul && k.gemm_16row_groups && repack_enabled() && packed_layout_supported(t.type, t.rows(), t.cols()) &&
        t.ne[3] == 1) {
        const int64_t rows = t.rows() * t.ne[2];
        t.packed = make_packed(t.type, t.data, t.row_bytes, rows, t.cols());
        t.packed_group_bytes = packed_group_bytes(t.type, t.cols());
        release_mapped_pages(t.data, t.row_bytes * (size_t)rows);
    }
    return t;
}

const float* load_f32_vector(const GgufFile& file, TensorKind kind, int layer, int64_t n, bool required) {
    const std::string name = tensor_name(kind, layer);
    const GgufTensor* gt = file.find_tensor(name);
    if (!gt) {
        if (required) file.fail("tensor '" + name + "'", "is missing");
        return nullptr;
    }
    if (gt->type != TYPE_F32 || gt->n_elements() != n || gt->ne[0] != n)
        file.fail("tensor '" + name + "'", std::string("must be an F32 vector of ") + std::to_string(n) +
                                               " values (has type " + type_info(gt->type).name + ", shape " +
                                               shape_str(gt->ne, gt->n_dims) + ")");
    return file.f32_copy(*gt);
}

const float* load_f32_rows(const GgufFile& file, TensorKind kind, int layer, int64_t width, int64_t rows,
                           bool required) {
    const std::string name = tensor_name(kind, layer);
    const GgufTensor* gt = file.find_tensor(name);
    if (!gt) {
        if (required) file.fail("tensor '" + name + "'", "is missing");
        return nullptr;
    }
    if (gt->type != TYPE_F32 || gt->n_elements() != width * rows || gt->ne[0] != width)
        file.fail("tensor '" + name + "'", std::string("must be F32 of ") + std::to_string(rows) + " rows of " +
                                               std::to_string(width) + " values (has type " +
                                               type_info(gt->type).name + ", shape " + shape_str(gt->ne, gt->n_dims) + ")");
    return file.f32_copy(*gt);
}

}  // namespace ei
