// The kernel facts the package needs: which ISA was selected (and which this CPU could run), a
// type's block geometry, and dequantizing a row (requantizing a file). The test-only kernel entry
// points (one quantize / dot / GEMM through a chosen ISA's table) are in testing/.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "cpu/kernels.h"
#include "quant/types.h"
#include "shared/row_checks.h"
#include "shared/table_arg.h"

namespace py = pybind11;
using bindings::Bytes;
using bindings::check_bytes;
using bindings::check_row;
using bindings::checked_type;
using bindings::entry;

void register_kernels(py::module_& m) {
    m.def("isa", [] { return std::string(ei::isa_name(ei::selected_isa())); },
          "Name of the kernel set in use: the best this CPU runs, or EDGEINFER_ISA's choice "
          "(read once; raises EdgeInferError if it names an ISA this machine cannot run).");

    m.def("available_isas", [] {
        std::vector<std::string> out;
        for (ei::Isa i : {ei::Isa::scalar, ei::Isa::avx2, ei::Isa::avx512, ei::Isa::neon})
            if (ei::isa_available(i)) out.push_back(ei::isa_name(i));
        return out;
    }, "Every ISA whose kernels this build has and this CPU runs, lowest first.");

    m.def("type_info", [](uint32_t type) {
        const ei::TypeInfo& ti = checked_type(type);
        py::dict d;
        d["name"] = ti.name;
        d["block_size"] = ti.block_size;
        d["type_size"] = ti.type_size;
        return d;
    }, py::arg("type"), "Block geometry of a ggml type id: dict(name, block_size, type_size).");

    m.def("weight_types", [] {
        const ei::KernelTable& t = table_for(py::none());
        std::vector<std::string> out;
        for (uint32_t type = 0; type < ei::TYPE_COUNT; ++type)
            if (ei::type_known(type) && t.types[type].vec_dot && t.types[type].to_float)
                out.push_back(ei::type_info(type).name);
        return out;
    }, "Names of the tensor types the kernel set in use computes with (it has their dot product and "
       "dequantization): a model whose weights are of another type cannot run.");

    m.def("dequantize", [](uint32_t type, const Bytes& raw, int64_t n, const py::object& isa) {
        const ei::TypeKernels& k = entry(table_for(isa), type);
        if (!k.to_float) throw ei::Error(std::string("no to_float kernel for ") + ei::type_info(type).name);
        check_row(type, n);
        check_bytes(type, n, raw, "dequantize");
        py::array_t<float> out(n);
        k.to_float(raw.data(), out.mutable_data(), n);
        return out;
    }, py::arg("type"), py::arg("raw"), py::arg("n"), py::arg("isa") = py::none(),
       "Dequantize a row of n elements stored as `type` (uint8 array of its blocks) to float32.");
}
