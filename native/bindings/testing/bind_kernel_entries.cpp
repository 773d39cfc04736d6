// Kernel table entries one call each, for tests: an activation quantizer, a dot product in each of
// the float orders the matmul uses, and each GEMM entry, through a chosen ISA's table, so that every
// ISA can be compared with the scalar reference. The forward pass calls the table directly.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "quant/types.h"
#include "shared/row_checks.h"
#include "shared/table_arg.h"

namespace py = pybind11;
using bindings::Bytes;
using bindings::check_bytes;
using bindings::check_row;
using bindings::entry;
using bindings::Floats;

void register_kernel_entries(py::module_& m) {
    m.def("vec_dot_type", [](uint32_t type) {
        return entry(ei::kernels_for(ei::Isa::scalar), type).vec_dot_type;
    }, py::arg("type"), "The type activations are converted to for dot products with weights of `type`.");

    m.def("quantize", [](uint32_t type, const Floats& x, const py::object& isa) {
        const ei::TypeKernels& k = entry(table_for(isa), type);
        if (!k.from_float)
            throw ei::Error(std::string("no from_float kernel for ") + ei::type_info(type).name +
                            " (activation types only: f32, f16, bf16, q8_0, q8_1)");
        const int64_t n = x.size();
        check_row(type, n);
        py::array_t<uint8_t> out((py::ssize_t)ei::row_bytes(type, n));
        k.from_float(x.data(), out.mutable_data(), n);
        return out;
    }, py::arg("type"), py::arg("x"), py::arg("isa") = py::none(),
       "Quantize a float32 row into `type` blocks (an activation type) -> uint8 array.");

    m.def("vec_dot", [](uint32_t type, const Bytes& w, const Floats& act, const py::object& isa) {
        const ei::KernelTable& t = table_for(isa);
        const ei::TypeKernels& k = entry(t, type);
        if (!k.vec_dot) throw ei::Error(std::string("no vec_dot kernel for ") + ei::type_info(type).name);
        const int64_t n = act.size();
        check_row(type, n);
        check_row(k.vec_dot_type, n);
        check_bytes(type, n, w, "vec_dot weights");
        std::vector<uint8_t> y(ei::row_bytes(k.vec_dot_type, n));
        t.types[k.vec_dot_type].from_float(act.data(), y.data(), n);
        float s = 0.0f;
        k.vec_dot(n, &s, w.data(), y.data());
        return s;
    }, py::arg("type"), py::arg("w"), py::arg("act"), py::arg("isa") = py::none(),
       "dot(weights row of `type`, float32 activations), the activations first converted to "
       "vec_dot_type(type) with the same ISA's quantizer, as the matmul path does.");

    m.def("vec_dot_raw", [](uint32_t type, const Bytes& w, const Bytes& y, int64_t n, const py::object& isa,
                            const std::string& order) {
        const ei::TypeKernels& k = entry(table_for(isa), type);
        ei::VecDotFn f = nullptr;
        if (order == "vec_dot") f = k.vec_dot;
        else if (order == "tiled") f = k.vec_dot_ggml_tiled;
        else if (order == "repacked") f = k.vec_dot_ggml_repack;
        else if (order == "repacked_gemm") f = k.vec_dot_ggml_repack_gemm;
        else throw ei::Error("order must be vec_dot, tiled, repacked or repacked_gemm, not " + order);
        if (!f) throw ei::Error("no " + order + " kernel for " + ei::type_info(type).name);
        check_row(type, n);
        check_bytes(type, n, w, "vec_dot_raw weights");
        check_bytes(k.vec_dot_type, n, y, "vec_dot_raw activations");
        float s = 0.0f;
        f(n, &s, w.data(), y.data());
        return s;
    }, py::arg("type"), py::arg("w"), py::arg("y"), py::arg("n"), py::arg("isa") = py::none(),
       py::arg("order") = "vec_dot",
       "dot(weights row of `type`, activations already stored as vec_dot_type(type)); `order` picks "
       "the float order: vec_dot, or the one matmul uses for repacked weights / tiled k-quant batches.");

    m.def("gemm", [](uint32_t type, const Bytes& w, int64_t m, const Floats& act, const py::object& isa,
                     bool by_vec_dot, const std::string& order) {
        // "packed_fast": the packed kernels of FloatOrder::fast's table.
        const ei::KernelTable& t = order == "packed_fast" ? ei::kernels_for(table_for(isa).isa, ei::FloatOrder::fast)
                                                          : table_for(isa);
        const ei::TypeKernels& k = entry(t, type);
        if (act.ndim() != 2) throw ei::Error("gemm: activations must be [n, k]");
        const int64_t n = act.shape(0), kk = act.shape(1);
        check_row(type, kk);
        const size_t w_row = ei::row_bytes(type, kk), a_row = ei::row_bytes(k.vec_dot_type, kk);
        if ((size_t)w.size() != w_row * (size_t)m) throw ei::Error("gemm: weights must be m rows of k elements");
        // The GEMM entry and the per-output function whose float order it reproduces.
        ei::GemmFn gemm = nullptr;
        ei::VecDotFn dot = nullptr;
        if (order == "vec_dot") {
            gemm = k.gemm;
            dot = k.vec_dot;
        } else if (order == "repacked_gemm") {
            gemm = k.gemm_ggml_repack;
            dot = k.vec_dot_ggml_repack_gemm;
        } else if (order == "tiled") {
            gemm = k.gemm_ggml_tiled;
            dot = k.vec_dot_ggml_tiled;
        } else if (order == "small_batch") {  // the decode-batch GEMM: weights streamed once
            gemm = k.gemm_small_batch;
            dot = k.vec_dot;
        } else if (order == "small_batch_repacked") {  // the same in the repacked GEMV's order
            gemm = k.gemm_small_batch_ggml_repack;
            dot = k.vec_dot_ggml_repack;
        } else if (order == "packed" || order == "packed_fast") {  // weights repacked into 16-row groups first (cpu/repack.h)
            gemm = k.gemm_16row_groups;
            dot = k.vec_dot;  // only its activation type is used: there is no per-output form
            if (by_vec_dot) throw ei::Error("gemm: the packed order has no per-output function");
            if (gemm && !ei::packed_layout_supported(type, m, kk))
                throw ei::Error("gemm: the packed layout needs whole groups of 16 rows (m = " + std::to_string(m) + ")");
        } else {
            throw ei::Error("gemm: order must be vec_dot, small_batch, small_batch_repacked, repacked_gemm, tiled, "
                            "packed or packed_fast, not " + order);
        }
        if (!by_vec_dot && !gemm)
            throw ei::Error("no " + order + " gemm kernel for " + ei::type_info(type).name + " in this table");
        if (!dot || !t.types[k.vec_dot_type].from_float)
            throw ei::Error("no " + order + " dot product for " + ei::type_info(type).name);
        std::vector<uint8_t> a(a_row * (size_t)n);
        for (int64_t c = 0; c < n; ++c) t.types[k.vec_dot_type].from_float(act.data() + c * kk, a.data() + c * a_row, kk);
        py::array_t<float> out({n, m});
        float* y = out.mutable_data();
        if (by_vec_dot) {
            for (int64_t c = 0; c < n; ++c)
                for (int64_t r = 0; r < m; ++r) dot(kk, &y[c * m + r], w.data() + r * w_row, a.data() + c * a_row);
        } else if (order == "packed" || order == "packed_fast") {
            const std::shared_ptr<const uint8_t> packed = ei::make_packed(type, w.data(), w_row, m, kk);
            gemm(kk, m, n, packed.get(), ei::packed_group_bytes(type, kk), a.data(), a_row, y, m);
        } else {
            gemm(kk, m, n, w.data(), w_row, a.data(), a_row, y, m);
        }
        return out;
    }, py::arg("type"), py::arg("w"), py::arg("m"), py::arg("act"), py::arg("isa") = py::none(),
       py::arg("by_vec_dot") = false, py::arg("order") = "vec_dot",
       "[n, m] = act [n, k] times the m weight rows (bytes of `type`), activations quantized with "
       "the table's from_float; by the table's GEMM entry for `order` (vec_dot: gemm; repacked_gemm: "
       "gemm_ggml_repack; tiled: gemm_ggml_tiled; packed: the weights repacked into 16-row groups, then "
       "gemm_16row_groups; packed_fast: the same in FloatOrder::fast's table; small_batch: "
       "gemm_small_batch, the decode-batch GEMM), or (by_vec_dot) one call per output of the per-output "
       "function in that order (vec_dot, vec_dot_ggml_repack_gemm, vec_dot_ggml_tiled).");
}
