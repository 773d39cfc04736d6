// WordPiece tokenizer (tokenizer.ggml.model "bert": BERT, bge, all-MiniLM, e5), exactly as
// llama.cpp's llm_tokenizer_wpm_session: the text is normalized (lowercased, accents stripped by
// keeping the first code point of each NFD and dropping marks, as the file's normalizer keys say;
// control characters dropped), split at whitespace and around every punctuation mark, ASCII symbol
// and CJK ideograph; each word gets a '▁' in front and is cut greedily into the longest vocabulary
// entries from the left ("##" continuations are stored without their "##", word starts with '▁',
// convert_hf_to_gguf's "phantom space" vocabulary). A word that does not cut completely is one
// [UNK]. Internal to vocab/.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "vocab/token_map.h"

namespace ei {

class WpmTokenizer {
public:
    // `token_to_id` must outlive this object; max_token_len: bytes of the longest token text.
    WpmTokenizer(const TokenMap& token_to_id, int32_t unk, bool lowercase, bool strip_accents, size_t max_token_len);

    // Appends the ids of one raw-text fragment (special tokens were split off before).
    void tokenize(std::string_view text, std::vector<int32_t>& out) const;

private:
    const TokenMap& token_to_id_;
    int32_t unk_;
    bool lowercase_, strip_accents_;
    size_t max_token_len_;
};

}  // namespace ei
