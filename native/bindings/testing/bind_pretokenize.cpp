// The pre-tokenizers alone, for tests: the words a `tokenizer.ggml.pre` splits text into can be
// compared with another implementation's (Hugging Face tokenizers) before any merge hides them.
// The tokenizer calls pre_tokenize directly, never through here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "vocab/pretokenize.h"

namespace py = pybind11;

void register_pretokenize(py::module_& m) {
    m.def("pre_tokenize", [](const std::string& name, const std::string& text) {
        const ei::PreTokenizer pre = ei::make_pre_tokenizer(name);
        ei::PreTokenized out;
        ei::pre_tokenize(pre, text, out);
        std::vector<py::bytes> words;
        uint32_t begin = 0;
        for (uint32_t end : out.word_ends) {
            words.emplace_back(out.normalized.data() + begin, end - begin);
            begin = end;
        }
        return words;
    }, py::arg("name"), py::arg("text"),
       "The words (UTF-8 bytes) the pre-tokenizer `name` (a tokenizer.ggml.pre value) splits "
       "`text` into.");
}
