// Pre-tokenizers for byte-level BPE: split text into words before merging, as llama.cpp does for
// each `tokenizer.ggml.pre`. Each pre-tokenizer is a list of regexes applied in turn, each one
// splitting the pieces the previous left (a piece is never merged with its neighbours again, and
// look-aheads stop at a piece's end). The regexes are hand-coded over code point flags, like
// llama.cpp's unicode.cpp does for the GPT-2 and Llama-3 patterns: no std::regex.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ei {

// One regex of a pre-tokenizer's list.
enum class PreSplit : uint8_t {
    GPT2,          // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    LLAMA3,        // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    QWEN2,         // the same with \p{N} (one digit) instead of \p{N}{1,3}
    O200K,         // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
                   // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
                   // \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+   (gpt-4o, gpt-oss)
    DIGIT,         // \p{N}: every digit alone
    DIGIT_RUN,     // \p{N}+
    ASCII_DIGIT3,  // [0-9][0-9][0-9]
    PUNCT_RUN,     // [\p{P}\$\+<=>\^~\|]+
    PUNCT_RUN_BT,  // [\p{P}\$\+<=>\^~\|`]+ (falcon)
};

struct PreTokenizer {
    std::string name;              // tokenizer.ggml.pre as written ("default" if absent)
    std::vector<PreSplit> splits;  // applied in order
    bool ignore_merges = false;    // a word that is a whole token is not merged (llama3 family)
    int add_bos = -1;              // default for add_bos_token when the file does not say: -1 = model default
    bool no_bos = false;           // the pre-tokenizer disables the BOS token (chatglm)
};

// llama.cpp's pre-tokenizer for `name`; throws ei::Error("unsupported pre-tokenizer 'X' ...")
// for names llama.cpp does not know or this runtime does not implement yet.
PreTokenizer make_pre_tokenizer(const std::string& name);

// Every name make_pre_tokenizer takes (for `edgeinfer info`, which does not build vocabularies).
std::vector<std::string> supported_pre_tokenizers();

// The words of `text`, as [begin, end) byte ranges of `normalized`, which is `text` with invalid
// UTF-8 replaced by U+FFFD (llama.cpp tokenizes the replaced text).
struct PreTokenized {
    std::string normalized;
    std::vector<uint32_t> word_ends;  // byte offsets; word i is [word_ends[i-1], word_ends[i])
};
void pre_tokenize(const PreTokenizer& pre, std::string_view text, PreTokenized& out);

}  // namespace ei
