// _core.GgufFile: the GGUF reader for Python (inspection, tests, tools). Metadata values become
// plain Python objects on request; tensor bytes are zero-copy read-only numpy views of the mapping
// that keep the file object (and so the mapping) alive.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "arch/hparams.h"
#include "gguf/gguf.h"
#include "quant/types.h"

namespace py = pybind11;
using ei::GgufFile;
using ei::GgufType;
using ei::GgufValue;

namespace {

// Strings in a GGUF file should be UTF-8 but nothing guarantees it; never fail on bad bytes.
py::str decode_utf8(std::string_view s) {
    PyObject* o = PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "replace");
    if (!o) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(o);
}

py::object scalar_to_py(const GgufValue& v) {
    switch (v.type) {
        case GgufType::BOOL: return py::bool_(v.i != 0);
        case GgufType::UINT64: return py::int_(v.u);
        case GgufType::FLOAT32: case GgufType::FLOAT64: return py::float_(v.f);
        case GgufType::STRING: return decode_utf8(v.str);
        default: return py::int_(v.i);  // every other integer type
    }
}

py::object value_to_py(const GgufValue& v) {
    if (v.type != GgufType::ARRAY) return scalar_to_py(v);
    py::list out((size_t)v.count);
    size_t k = 0;
    ei::gguf_for_each_element(v, [&](const GgufValue& e) { out[k++] = scalar_to_py(e); });
    return out;
}

const ei::GgufTensor& require_tensor(const GgufFile& f, const std::string& name) {
    const ei::GgufTensor* t = f.find_tensor(name);
    if (!t) throw py::key_error("no tensor named '" + name + "' in " + f.path());
    return *t;
}

py::dict tensor_to_py(const ei::GgufTensor& t) {
    py::list shape;
    for (uint32_t d = 0; d < t.n_dims; ++d) shape.append(t.ne[d]);
    py::dict d;
    d["name"] = decode_utf8(t.name);  // valid UTF-8 (checked at open)
    d["type"] = t.type;
    d["type_name"] = ei::type_info(t.type).name;
    d["shape"] = shape;
    d["offset"] = t.offset;
    d["nbytes"] = t.nbytes;
    d["part"] = t.part;  // the part of a split model that holds it; `offset` is within that part
    return d;
}

// Read-only uint8 view of a tensor's bytes; `owner` (the Python GgufFile) is the array's base.
py::array tensor_data(py::object owner, const std::string& name) {
    const GgufFile& f = owner.cast<const GgufFile&>();
    const ei::GgufTensor& t = require_tensor(f, name);
    py::array_t<uint8_t> a({(py::ssize_t)t.nbytes}, {(py::ssize_t)1}, t.data, owner);
    a.attr("setflags")(py::arg("write") = false);
    return a;
}

}  // namespace

void register_gguf(py::module_& m) {
    py::class_<GgufFile, std::shared_ptr<GgufFile>>(m, "GgufFile",
        "A GGUF file (v2/v3) mapped read-only and fully validated on open.\n"
        "Raises ModelFormatError for a malformed file, EdgeInferError if it cannot be opened.")
        .def(py::init([](const std::string& path) {
                 py::gil_scoped_release nogil;  // opening walks the metadata; let other threads run
                 return std::make_shared<GgufFile>(path);
             }),
             py::arg("path"))
        .def_property_readonly("path", &GgufFile::path)
        .def_property_readonly("version", &GgufFile::version)
        .def_property_readonly("alignment", &GgufFile::alignment)
        .def_property_readonly("data_offset", &GgufFile::data_offset,
                               "Byte offset of the tensor data section in the file.")
        .def_property_readonly("file_size", &GgufFile::total_size,
                               "Bytes of the file (of all its parts, for a split model).")
        .def_property_readonly("parts",
                               [](const GgufFile& f) {
                                   py::list out;
                                   for (size_t i = 0; i < f.n_parts(); ++i) out.append(f.part_path(i));
                                   return out;
                               },
                               "Paths of a split model's parts, the first one first ([path] for a whole file).")
        .def("keys",
             [](const GgufFile& f) {
                 py::list out;
                 for (const auto& kv : f.kv()) out.append(decode_utf8(kv.first));
                 return out;
             },
             "Metadata keys in file order.")
        .def("metadata",
             [](const GgufFile& f) {
                 py::dict out;
                 for (const auto& kv : f.kv()) out[decode_utf8(kv.first)] = value_to_py(kv.second);
                 return out;
             },
             "All metadata as a dict (arrays become lists; large vocabularies take a moment).")
        .def("hparams",
             [](const GgufFile& f) {
                 const ei::HParams hp = ei::read_hparams(f);
                 py::dict d;
                 d["arch"] = decode_utf8(hp.arch);
                 d["n_ctx_train"] = hp.n_ctx_train;
                 d["n_embd"] = hp.n_embd;
                 d["n_layer"] = hp.n_layer;
                 d["n_head"] = hp.n_head;
                 d["n_head_kv"] = hp.n_head_kv;
                 d["head_dim"] = hp.head_dim;
                 d["n_ff"] = hp.n_ff;
                 d["n_rot"] = hp.n_rot;
                 d["norm_eps"] = hp.norm_eps;
                 d["rope_freq_base"] = hp.rope_freq_base;
                 d["rope_freq_base_swa"] = hp.rope_freq_base_swa;
                 d["rope_freq_scale"] = hp.rope_freq_scale;
                 d["rope_scaling"] = ei::rope_scaling_name(hp.rope_scaling);
                 d["rope_attn_factor"] = hp.rope_attn_factor;
                 d["rope_n_ctx_orig"] = hp.rope_n_ctx_orig;
                 d["yarn_ext_factor"] = hp.yarn_ext_factor;
                 d["yarn_beta_fast"] = hp.yarn_beta_fast;
                 d["yarn_beta_slow"] = hp.yarn_beta_slow;
                 d["q_width"] = hp.q_width();
                 d["kv_width"] = hp.kv_width();
                 return d;
             },
             "The hyper-parameters every decoder shares, read as the core reads them when it loads the\n"
             "model (arch/hparams.h), without loading it: a dict with arch, n_ctx_train, n_embd, n_layer,\n"
             "n_head, n_head_kv, head_dim, n_ff, n_rot, norm_eps, rope_freq_base, rope_freq_base_swa,\n"
             "rope_freq_scale, rope_scaling (none, linear, yarn, longrope), rope_attn_factor (cos and sin's scale),\n"
             "rope_n_ctx_orig, yarn_ext_factor, yarn_beta_fast, yarn_beta_slow, q_width and kv_width (values\n"
             "per K or V row). Raises ModelFormatError\n"
             "if a key is missing or invalid.")
        .def("get",
             [](const GgufFile& f, const std::string& key, py::object fallback) {
                 const GgufValue* v = f.find(key);
                 return v ? value_to_py(*v) : fallback;
             },
             py::arg("key"), py::arg("default") = py::none(), "One metadata value, or `default`.")
        // The typed getters model code uses in C++, exposed so Python tools and tests get exactly
        // the same checks and messages. Without `default` the key is required.
        .def("get_int",
             [](const GgufFile& f, const std::string& key, std::optional<int64_t> fallback) {
                 return fallback ? f.get_int(key, *fallback) : f.get_int(key);
             },
             py::arg("key"), py::arg("default") = py::none())
        .def("get_float", &GgufFile::get_float, py::arg("key"), py::arg("default"))
        .def("get_bool", &GgufFile::get_bool, py::arg("key"), py::arg("default"))
        .def("get_string",
             [](const GgufFile& f, const std::string& key, std::optional<std::string> fallback) {
                 return decode_utf8(fallback ? f.get_string(key, *fallback) : f.get_string(key));
             },
             py::arg("key"), py::arg("default") = py::none())
        .def("get_string_array",
             [](const GgufFile& f, const std::string& key) {
                 std::vector<std::string_view> items = f.get_string_array(key);
                 py::list out(items.size());
                 for (size_t k = 0; k < items.size(); ++k) out[k] = decode_utf8(items[k]);
                 return out;
             },
             py::arg("key"))
        .def("get_int_array", &GgufFile::get_int_array, py::arg("key"))
        .def("get_float_array", &GgufFile::get_float_array, py::arg("key"))
        .def("array_size", &GgufFile::array_size, py::arg("key"))
        .def("__contains__", [](const GgufFile& f, const std::string& key) { return f.find(key) != nullptr; })
        .def("tensors",
             [](const GgufFile& f) {
                 py::list out;
                 for (const auto& t : f.tensors()) out.append(tensor_to_py(t));
                 return out;
             },
             "Tensor infos in file order: dicts {name, type, type_name, shape (ne order), offset, nbytes}.")
        .def("tensor", [](const GgufFile& f, const std::string& name) { return tensor_to_py(require_tensor(f, name)); },
             py::arg("name"))
        .def("tensor_data", &tensor_data, py::arg("name"),
             "The tensor's raw bytes: a read-only, zero-copy numpy uint8 view of the mapping.")
        .def("__repr__", [](const GgufFile& f) {
            return "<GgufFile '" + f.path() + "' v" + std::to_string(f.version()) + ", " +
                   std::to_string(f.kv().size()) + " keys, " + std::to_string(f.tensors().size()) + " tensors>";
        });
}
