// Byte-level BPE (tokenizer.ggml.model "gpt2"): pre-tokenize, then merge each word's bytes by
// merge rank, exactly as llama.cpp's llm_tokenizer_bpe_session does. Internal to vocab/.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vocab/pretokenize.h"
#include "vocab/token_map.h"

namespace ei {

class BpeTokenizer {
public:
    // `token_to_id` must outlive this object. `merges` are "left right" strings, rank = index.
    BpeTokenizer(const TokenMap& token_to_id, int32_t n_vocab,
                 const std::vector<std::string_view>& merges, PreTokenizer pre);

    // Appends the ids of `text` (no special tokens: those were split off before).
    void tokenize(std::string_view text, std::vector<int32_t>& out) const;

    const PreTokenizer& pre() const { return pre_; }

private:
    struct Merge {
        int32_t rank;
        int32_t result;  // symbol id of left+right
    };

    // One pre-tokenized word (raw bytes) -> ids.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    const TokenMap& token_to_id_;
    int32_t n_vocab_;
    PreTokenizer pre_;
    // Symbols are token ids, plus ids >= n_vocab for strings that occur in merges but are not
    // tokens (llama.cpp merges by text, so those still merge).
    std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
    std::array<int32_t, 256> byte_symbol_;         // symbol of each byte's GPT-2 character, -1 if none
    // llama.cpp's fallback for a final symbol that is not a token: each byte of its text, if
    // that single byte is a token.
    std::array<std::vector<int32_t>, 256> byte_fallback_;
};

}  // namespace ei
