// Placeholder until this binding lands.
#include <pybind11/pybind11.h>
namespace py = pybind11;
void register_vocab(py::module_&) {}
