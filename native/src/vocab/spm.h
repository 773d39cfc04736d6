// SentencePiece-style tokenizer (tokenizer.ggml.model "llama": LLaMA 1/2, Gemma 1-3, ...):
// spaces become U+2581 '▁', then UTF-8 characters merge pairwise, highest token score first,
// exactly as llama.cpp's llm_tokenizer_spm_session does; what forms no token falls back to
// <0xXX> byte tokens. Internal to vocab/.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "vocab/token_map.h"

namespace ei {

class SpmTokenizer {
public:
    // `token_to_id` must outlive this object. `scores` has one entry per token. `unk` (-1 if
    // none) stands in for a byte that has no token at all (see byte_token_).
    SpmTokenizer(const TokenMap& token_to_id, std::vector<float> scores, int32_t unk);

    // Appends the ids of one raw-text fragment (special tokens were split off before).
    // `space_prefix`: put a space in front first (llama.cpp does so at the start of the text and
    // after every special token when add_space_prefix is on).
    void tokenize(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;

private:
    const TokenMap& token_to_id_;
    std::vector<float> scores_;  // [n_tokens] merge priority: higher merges first
    // Token of each byte for the fallback: "<0xXX>", else the byte itself as a token, else unk
    // (llama.cpp's byte_to_token throws there; a vocabulary with byte_fallback never gets there).
    std::array<int32_t, 256> byte_token_;
};

}  // namespace ei
