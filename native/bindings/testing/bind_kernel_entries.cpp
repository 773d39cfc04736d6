// Kernel table entries one call each, for tests: an activation quantizer, a dot product in each of
// the float orders the matmul uses, and each GEMM entry, through a chosen ISA's table, so that every
// ISA can be compared with the scalar reference. The forward pass calls the table directly.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
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

    m.def("matmul", [](const std::vector<std::tuple<uint32_t, Bytes, int64_t>>& weights, const Floats& x,
                       int n_threads, const py::object& isa, bool fast, bool same_input, bool per_row) {
        // The weights repacked as loading does where the table has packed kernels for them.
        const ei::KernelTable& t = fast ? ei::kernels_for(table_for(isa).isa, ei::FloatOrder::fast) : table_for(isa);
        if (x.ndim() != 2 || weights.empty() || (int)weights.size() > ei::kMaxSameInput)
            throw ei::Error("matmul: x is [n, k]; 1.." + std::to_string(ei::kMaxSameInput) + " weights");
        const int64_t n = x.shape(0), k = x.shape(1);
        std::vector<ei::Tensor> W(weights.size());
        std::vector<py::array_t<float>> outs;
        for (size_t i = 0; i < weights.size(); ++i) {
            const auto& [type, bytes, rows] = weights[i];
            entry(t, type);
            check_row(type, k);
            ei::Tensor& w = W[i];
            w.type = type;
            w.ne[0] = k;
            w.ne[1] = rows;
            w.row_bytes = ei::row_bytes(type, k);
            if ((size_t)bytes.size() != w.row_bytes * (size_t)rows) throw ei::Error("matmul: weight bytes != rows x k");
            w.data = bytes.data();
            if (t.types[type].gemm_16row_groups && ei::packed_layout_supported(type, rows, k)) {
                w.packed = ei::make_packed(type, w.data, w.row_bytes, rows, k);
                w.packed_group_bytes = ei::packed_group_bytes(type, k);
            }
            outs.emplace_back(std::vector<py::ssize_t>{n, rows});
        }
        std::vector<const ei::Tensor*> wp;
        std::vector<float*> yp;
        for (size_t i = 0; i < W.size(); ++i) wp.push_back(&W[i]), yp.push_back(outs[i].mutable_data());
        const ei::BatchOrder order = per_row ? ei::BatchOrder::per_row : ei::BatchOrder::llama_cpp;
        {
            py::gil_scoped_release nogil;
            ei::ThreadPool pool(n_threads);
            ei::MatmulScratch scratch;
            if (same_input) {
                ei::matmul_same_input(pool, t, wp.data(), yp.data(), (int)wp.size(), x.data(), n, scratch, order);
            } else {
                for (size_t i = 0; i < W.size(); ++i) ei::matmul(pool, t, W[i], x.data(), n, yp[i], scratch, order);
            }
        }
        return outs;
    }, py::arg("weights"), py::arg("x"), py::arg("n_threads") = 1, py::arg("isa") = py::none(),
       py::arg("fast") = false, py::arg("same_input") = false, py::arg("per_row") = false,
       "y_i = W_i x for [(type, bytes, rows), ...] and x [n, k], as the forward pass runs it (weights "
       "repacked where the table packs them): one matmul each, or (same_input) all through "
       "matmul_same_input -> [y_i [n, rows_i]].");
}
