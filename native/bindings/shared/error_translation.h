// The core's C++ errors as Python exceptions. edgeinfer._core defines the classes; the testing
// module raises the same ones, so a test catches EdgeInferError whichever module raised it.
#pragma once
#include <pybind11/pybind11.h>

#include <cstring>

#include "common/error.h"

namespace bindings {

// The Python classes the C++ error types map to (borrowed: they live as long as edgeinfer._core).
struct ErrorClasses {
    pybind11::handle base, format, overflow, state;
};

// Messages may quote a file name or a GGUF string, which need not be UTF-8; py::set_error would
// then fail to make the message and raise a UnicodeDecodeError in place of the real error.
inline void raise_with_message(pybind11::handle type, const char* what) {
    pybind11::object message = pybind11::reinterpret_steal<pybind11::object>(
        PyUnicode_DecodeUTF8(what, (Py_ssize_t)std::strlen(what), "replace"));
    if (!message) return;  // out of memory: that error is already set
    PyErr_SetObject(type.ptr(), message.ptr());
}

// Translates an in-flight exception if it is one of the core's; rethrows anything else.
inline void translate_core_error(const ErrorClasses& c, std::exception_ptr p) {
    try {
        if (p) std::rethrow_exception(p);
    } catch (const ei::FormatError& e) {
        raise_with_message(c.format, e.what());
    } catch (const ei::ContextOverflowError& e) {
        raise_with_message(c.overflow, e.what());
    } catch (const ei::StateError& e) {
        raise_with_message(c.state, e.what());
    } catch (const ei::Error& e) {
        raise_with_message(c.base, e.what());
    }
}

}  // namespace bindings
