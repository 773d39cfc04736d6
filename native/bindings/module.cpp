// edgeinfer._core: the private extension. One register_<thing> per bound class or concern;
// exceptions are mapped here so every binding throws the same Python family.
#include <pybind11/pybind11.h>

#include <cstring>

#include "common/error.h"

namespace py = pybind11;

void register_gguf(py::module_& m);
void register_kernels(py::module_& m);
void register_ops(py::module_& m);
void register_vocab(py::module_& m);
void register_model(py::module_& m);
void register_kv(py::module_& m);
void register_quantize(py::module_& m);
void register_gpu(py::module_& m);

namespace {
// Messages may quote a file name or a GGUF string, which need not be UTF-8; py::set_error would
// then fail to make the message and raise a UnicodeDecodeError in place of the real error.
void set_error(const py::object& type, const char* what) {
    py::object message = py::reinterpret_steal<py::object>(
        PyUnicode_DecodeUTF8(what, (Py_ssize_t)std::strlen(what), "replace"));
    if (!message) return;  // out of memory: that error is already set
    PyErr_SetObject(type.ptr(), message.ptr());
}
}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "edgeinfer native core (private; use the edgeinfer package)";
    static py::exception<ei::Error> base(m, "EdgeInferError", PyExc_RuntimeError);
    static py::exception<ei::FormatError> format(m, "ModelFormatError", base.ptr());
    static py::exception<ei::ContextOverflowError> overflow(m, "ContextOverflowError", base.ptr());
    static py::exception<ei::StateError> state(m, "StateFileError", base.ptr());
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const ei::FormatError& e) {
            set_error(format, e.what());
        } catch (const ei::ContextOverflowError& e) {
            set_error(overflow, e.what());
        } catch (const ei::StateError& e) {
            set_error(state, e.what());
        } catch (const ei::Error& e) {
            set_error(base, e.what());
        }
    });
    register_gguf(m);
    register_kernels(m);
    register_ops(m);
    register_vocab(m);
    register_model(m);
    register_kv(m);
    register_quantize(m);
    register_gpu(m);
}
