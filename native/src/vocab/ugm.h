// Unigram tokenizer (tokenizer.ggml.model "t5": T5, XLM-RoBERTa, bge-m3, multilingual-e5), exactly
// as llama.cpp's llm_tokenizer_ugm_session, which follows SentencePiece's optimized Viterbi:
//
//   1. normalize: the longest prefix of the text in the precompiled charsmap (SentencePiece's
//      nmt_nfkc rules, compiled into a double-array trie) is replaced, user-defined tokens are kept
//      as they are, invalid UTF-8 becomes U+FFFD; spaces become U+2581 '▁', with one in front of
//      the text (add_space_prefix) or in front of every word and none elsewhere
//      (remove_extra_whitespaces);
//   2. segment: the split of the normalized text into tokens with the highest sum of scores (log
//      probabilities; user-defined tokens score 0), one code point without a token counting as
//      <unk> at the lowest normal score minus 10, and runs of <unk> merged into one.
//
// Internal to vocab/.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/token_map.h"

namespace ei {

class UgmTokenizer {
public:
    // What the segmentation makes of a vocabulary entry.
    enum class Role : uint8_t {
        other,         // control, unknown, byte: never matched in text
        normal,        // matched; its score counts, and sets the unknown score
        user_defined,  // matched with score 0, and never normalized
        unused,        // matched with its score
    };
    struct Options {
        bool add_space_prefix = false;          // tokenizer.ggml.add_space_prefix
        bool remove_extra_whitespaces = false;  // tokenizer.ggml.remove_extra_whitespaces
    };

    // `token_to_id` and `texts` must outlive this object; `roles` and `scores` have one entry per
    // token; `unk` is the unknown token; `charsmap` is tokenizer.ggml.precompiled_charsmap (may be
    // empty: no normalization rules; else one charsmap_fits accepts, which the caller checks to
    // name the key).
    UgmTokenizer(const TokenMap& token_to_id, const std::vector<std::string>& texts, std::vector<Role> roles,
                 std::vector<float> scores, int32_t unk, std::vector<uint8_t> charsmap, Options options);

    // Appends the ids of one raw-text fragment (special tokens were split off before).
    void tokenize(std::string_view text, std::vector<int32_t>& out) const;

    // Whether the charsmap is well formed enough to be walked: its 4-byte header (the size of the
    // trie in bytes) leaves room for at least one replacement byte after the trie.
    static bool charsmap_fits(const std::vector<uint8_t>& charsmap);

private:
    struct Prefix {            // one step of normalization
        const char* text;      // the replacement (or the input itself)
        size_t length;         // its bytes
        size_t consumed;       // input bytes it stands for
    };
    std::string normalize(std::string_view text) const;
    Prefix normalize_prefix(std::string_view text, size_t at) const;
    uint32_t trie_node(size_t index) const;

    const TokenMap& token_to_id_;
    const std::vector<std::string>& texts_;
    std::vector<Role> roles_;     // [n_tokens]
    std::vector<float> scores_;   // [n_tokens]
    int32_t unk_;
    double unknown_score_;        // lowest normal score - 10 (SentencePiece's kUnkPenalty)
    size_t max_token_len_ = 0;    // bytes of the longest matchable token
    size_t max_user_len_ = 0;     // bytes of the longest user-defined token
    Options options_;
    // The charsmap: [uint32 trie bytes][trie: uint32 nodes][NUL-terminated replacements].
    std::vector<uint8_t> charsmap_;
    size_t n_trie_nodes_ = 0;
    size_t replacements_offset_ = 0;  // where the replacement strings start in charsmap_
};

}  // namespace ei
