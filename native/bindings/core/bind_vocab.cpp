// _core.Vocab: the tokenizer for Python. Built from a _core.GgufFile (bound in bind_gguf.cpp);
// tokenize releases the GIL, pieces and texts come back as bytes (a token may be part of a
// UTF-8 character).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "gguf/gguf.h"
#include "vocab/pretokenize.h"
#include "vocab/vocab.h"

namespace py = pybind11;
using ei::Vocab;

void register_vocab(py::module_& m) {
    py::class_<Vocab>(m, "Vocab", "The model's tokenizer, read from a GGUF file's tokenizer.ggml.* metadata; "
                                  "gives exactly llama.cpp's token ids.")
        .def(py::init<const ei::GgufFile&>(), py::arg("gguf_file"),
             // The vocabulary copies what it needs: it does not keep the file open.
             "Reads the vocabulary. Raises ModelFormatError for a malformed one and EdgeInferError "
             "for an unsupported tokenizer model or pre-tokenizer.")
        .def("tokenize", &Vocab::tokenize, py::arg("text"), py::arg("add_special") = true,
             py::arg("parse_special") = false, py::call_guard<py::gil_scoped_release>(),
             "Text -> token ids. add_special: BOS/EOS as the model's flags say. parse_special: "
             "the text of control tokens (e.g. '<|im_start|>') becomes those tokens.")
        .def("pair", &Vocab::pair, py::arg("first"), py::arg("second"),
             "The ids of a pair of texts (a reranker's query and document) given each one's ids "
             "without special tokens: with the special tokens the model puts around and between "
             "them (BERT: [CLS] a [SEP] b [SEP]; XLM-RoBERTa: <s> a </s></s> b </s>).")
        .def("token_to_piece",
             [](const Vocab& v, int32_t id, bool special) { return py::bytes(v.token_to_piece(id, special)); },
             py::arg("id"), py::arg("special") = true,
             "The bytes token `id` stands for; control tokens give b'' unless special.")
        .def("detokenize",
             [](const Vocab& v, const std::vector<int32_t>& ids, bool special) {
                 std::string s;
                 {
                     py::gil_scoped_release release;
                     s = v.detokenize(ids, special);
                 }
                 return py::bytes(s);
             },
             py::arg("ids"), py::arg("special") = true, "The concatenated pieces of `ids` (bytes).")
        .def("token_text", [](const Vocab& v, int32_t id) { return py::bytes(v.token_text(id)); },
             py::arg("id"), "The raw vocabulary entry of `id` (bytes).")
        .def("token_type", &Vocab::token_type, py::arg("id"),
             "llama.cpp's token type of `id` (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, "
             "6 byte), after its load-time fixes.")
        .def("is_eog", &Vocab::is_eog, py::arg("id"), "Whether `id` ends generation.")
        .def_property_readonly("eog_ids", &Vocab::eog_ids, "The end-of-generation token ids, sorted.")
        .def_property_readonly("n_tokens", &Vocab::n_tokens)
        .def_property_readonly("model", &Vocab::model, "tokenizer.ggml.model")
        .def_property_readonly("pre", &Vocab::pre, "tokenizer.ggml.pre ('default' if absent)")
        .def_property_readonly("bos", &Vocab::bos, "BOS token id, -1 if none")
        .def_property_readonly("eos", &Vocab::eos, "EOS token id, -1 if none")
        .def_property_readonly("add_bos", &Vocab::add_bos)
        .def_property_readonly("add_eos", &Vocab::add_eos)
        .def("__len__", &Vocab::n_tokens);
    m.def("supported_pre_tokenizers", &ei::supported_pre_tokenizers,
          "Values of tokenizer.ggml.pre a byte-level BPE vocabulary may have in this build.");
}
