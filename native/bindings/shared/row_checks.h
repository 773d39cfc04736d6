// Argument checks shared by the kernel-level bindings of both modules: a type id the core knows,
// a row that is a whole number of blocks, a byte array of exactly one such row.
#pragma once
#include <pybind11/numpy.h>

#include <string>

#include "common/error.h"
#include "cpu/kernels.h"
#include "quant/types.h"

namespace bindings {

using Bytes = pybind11::array_t<uint8_t, pybind11::array::c_style | pybind11::array::forcecast>;
using Floats = pybind11::array_t<float, pybind11::array::c_style | pybind11::array::forcecast>;

inline const ei::TypeInfo& checked_type(uint32_t type) {
    if (!ei::type_known(type)) throw ei::Error("unknown ggml type id " + std::to_string(type));
    return ei::type_info(type);
}

// n must be a whole number of blocks of `type`.
inline void check_row(uint32_t type, int64_t n) {
    const ei::TypeInfo& ti = checked_type(type);
    if (n < 0 || n % ti.block_size != 0)
        throw ei::Error(std::string("row length ") + std::to_string(n) + " is not a multiple of the " + ti.name +
                        " block size " + std::to_string(ti.block_size));
}

inline void check_bytes(uint32_t type, int64_t n, const Bytes& raw, const char* what) {
    const size_t need = ei::row_bytes(type, n);
    if ((size_t)raw.size() != need)
        throw ei::Error(std::string(what) + ": " + std::to_string(raw.size()) + " bytes given, a " +
                        ei::type_info(type).name + " row of " + std::to_string(n) + " needs " + std::to_string(need));
}

inline const ei::TypeKernels& entry(const ei::KernelTable& t, uint32_t type) {
    checked_type(type);
    return t.types[type];
}

}  // namespace bindings
