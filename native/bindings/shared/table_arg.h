// The `isa=` keyword of the kernel-level bindings: None for the selected table, else an ISA name.
#pragma once
#include <pybind11/pybind11.h>

#include <string>

#include "common/error.h"
#include "cpu/kernels.h"

inline const ei::KernelTable& table_for(const pybind11::object& isa) {
    if (isa.is_none()) return ei::kernels();
    const std::string name = pybind11::cast<std::string>(isa);
    for (ei::Isa i : {ei::Isa::scalar, ei::Isa::avx2, ei::Isa::avx512, ei::Isa::neon})
        if (name == ei::isa_name(i)) return ei::kernels_for(i);
    throw ei::Error("unknown instruction set '" + name + "' (expected scalar, avx2, avx512 or neon)");
}
