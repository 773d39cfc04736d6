// edgeinfer._core: the private extension the package runs on. One register_<thing> per bound
// class or concern; the test-only entry points (one kernel, one op, one device op at a time) are
// in edgeinfer._testing (native/bindings/testing/), built from the same objects.
#include <pybind11/pybind11.h>

#include "common/error.h"
#include "shared/error_translation.h"

namespace py = pybind11;

void register_gguf(py::module_& m);
void register_kernels(py::module_& m);
void register_vocab(py::module_& m);
void register_model(py::module_& m);
void register_quantize(py::module_& m);
void register_gpu(py::module_& m);

PYBIND11_MODULE(_core, m) {
    m.doc() = "edgeinfer native core (private; use the edgeinfer package)";
    static py::exception<ei::Error> base(m, "EdgeInferError", PyExc_RuntimeError);
    static py::exception<ei::FormatError> format(m, "ModelFormatError", base.ptr());
    static py::exception<ei::ContextOverflowError> overflow(m, "ContextOverflowError", base.ptr());
    static py::exception<ei::StateError> state(m, "StateFileError", base.ptr());
    static const bindings::ErrorClasses classes{base, format, overflow, state};
    py::register_exception_translator([](std::exception_ptr p) { bindings::translate_core_error(classes, p); });
    register_gguf(m);
    register_kernels(m);
    register_vocab(m);
    register_model(m);
    register_quantize(m);
    register_gpu(m);
}
