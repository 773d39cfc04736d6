// Weight quantization for `edgeinfer quantize` and tests: float32 rows in, GGUF blocks out, with
// ggml's quantizers (quant/quantize.h), optionally with an importance matrix. The GIL is released
// while the rows are done.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "common/error.h"
#include "quant/quantize.h"
#include "quant/types.h"

namespace py = pybind11;

namespace {

std::string shape_text(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

}  // namespace

void register_quantize(py::module_& m) {
    using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;

    m.def("quantize_rows", [](uint32_t type, const Floats& x, int n_threads, const std::optional<Floats>& imatrix) {
        if (x.ndim() != 2) throw ei::Error("quantize_rows: x must be a 2-D float32 array [rows, n_per_row]");
        const int64_t nrows = x.shape(0), n_per_row = x.shape(1);
        if (imatrix && (imatrix->ndim() != 1 || imatrix->shape(0) != n_per_row))
            throw ei::Error("quantize_rows: imatrix must be a 1-D float32 array of n_per_row = " +
                            std::to_string(n_per_row) + " weights, got shape " + shape_text(*imatrix));
        if (!ei::has_quantizer(type)) {
            const char* name = ei::type_known(type) ? ei::type_info(type).name : "unknown";
            throw ei::Error(std::string("no quantizer for type ") + name);
        }
        const ei::TypeInfo& ti = ei::type_info(type);
        if (n_per_row % ti.block_size != 0)
            throw ei::Error("row length " + std::to_string(n_per_row) + " is not a multiple of the " + ti.name +
                            " block size " + std::to_string(ti.block_size));
        const size_t row_size = ei::row_bytes(type, n_per_row);
        py::array_t<uint8_t> out({(py::ssize_t)nrows, (py::ssize_t)row_size});
        const float* src = x.data();
        const float* weights = imatrix ? imatrix->data() : nullptr;
        uint8_t* dst = out.mutable_data();
        {
            py::gil_scoped_release release;
            ei::quantize_rows(type, src, dst, nrows, n_per_row, n_threads, weights);
        }
        return out;
    }, py::arg("type"), py::arg("x"), py::arg("n_threads") = 1, py::arg("imatrix") = py::none(),
       "Quantize float32 rows [rows, n_per_row] to ggml type id `type` with ggml's quantizer "
       "(bit-identical blocks) -> uint8 [rows, row_bytes]. Types: f32, f16, bf16, q4_0, q4_1, q5_0, "
       "q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4, tq1_0, tq2_0, iq2_xxs, iq2_xs, "
       "iq2_s, iq1_s, iq1_m. `imatrix`: None, or the importance weights of the row's n_per_row columns "
       "(float32, the same for every row), as llama-quantize --imatrix uses them; types whose ggml "
       "quantizer ignores them ignore them; iq2_xxs, iq2_xs and iq1_s need them.");

    m.def("quantizer_uses_imatrix", [](uint32_t type) { return ei::quantizer_uses_imatrix(type); }, py::arg("type"),
          "True if an importance matrix changes what quantize_rows writes for ggml type id `type`.");

    m.def("has_quantizer", [](uint32_t type) { return ei::has_quantizer(type); }, py::arg("type"),
          "True if quantize_rows can write ggml type id `type` (see quantizer_needs_imatrix).");

    m.def("quantizer_needs_imatrix", [](uint32_t type) { return ei::quantizer_needs_imatrix(type); },
          py::arg("type"), "True if quantize_rows refuses ggml type id `type` without an imatrix.");
}
