// The tokenizer, built from a GGUF file's `tokenizer.ggml.*` metadata: exactly llama.cpp's ids.
// Algorithms live in their own files (bpe.cpp: byte-level BPE with pre-tokenizers; spm.cpp:
// SentencePiece-style, scores and byte fallback; wpm.cpp: WordPiece; ugm.cpp: Unigram); this class holds the vocabulary and the
// special-token logic.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"

namespace ei {

// llama.cpp's token types (tokenizer.ggml.token_type), part of the file format.
enum TokenType : int32_t {
    TOKEN_UNDEFINED = 0, TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3,
    TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5, TOKEN_BYTE = 6,
};

class Vocab {
public:
    // Reads the vocabulary; throws FormatError for a malformed one and ei::Error for an
    // unsupported tokenizer model or pre-tokenizer (naming it).
    explicit Vocab(const GgufFile& file);
    ~Vocab();

    int32_t n_tokens() const;
    const std::string& model() const;  // tokenizer.ggml.model: "gpt2", "llama", ...
    const std::string& pre() const;    // tokenizer.ggml.pre, "default" if absent

    // Text -> ids. add_special: BOS/EOS as the GGUF flags say; parse_special: recognise the text
    // of control/user-defined tokens (e.g. "<|im_start|>") in `text`.
    std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;
    // The ids of a pair of texts (a reranker's query and document), each tokenized without
    // special tokens, joined with the special tokens this vocabulary puts around and between them.
    std::vector<int32_t> pair(const std::vector<int32_t>& first, const std::vector<int32_t>& second) const;

    // The bytes a token stands for when detokenizing (may be part of a UTF-8 character; SPM's
    // '▁' is a space, <0xXX> the byte). Control tokens give their text only if `special`. Raw:
    // no leading space is ever stripped, so streamed pieces concatenate to the generated text.
    std::string token_to_piece(int32_t id, bool special) const;
    // Concatenated pieces (bytes), as llama.cpp's common_detokenize: when the tokenizer adds a
    // space prefix (SPM add_space_prefix), one leading space of the first piece is dropped.
    std::string detokenize(const std::vector<int32_t>& ids, bool special) const;

    const std::string& token_text(int32_t id) const;  // raw vocabulary entry
    int32_t token_type(int32_t id) const;
    int32_t bos() const;  // -1 if none
    int32_t eos() const;  // -1 if none
    bool add_bos() const;
    bool add_eos() const;
    bool is_eog(int32_t id) const;  // end of generation: EOS, EOT and their known relatives
    const std::vector<int32_t>& eog_ids() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace ei
