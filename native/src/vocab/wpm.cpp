#include "vocab/wpm.h"

#include <algorithm>
#include <string>

#include "vocab/unicode.h"

namespace ei {

namespace {
#include "vocab/wpm_data.inc"

template <size_t N>
uint32_t lookup(const uint32_t (&table)[N][2], uint32_t cpt) {
    const auto* end = table + N;
    const auto* it = std::lower_bound(table, end, cpt, [](const uint32_t(&e)[2], uint32_t c) { return e[0] < c; });
    return it != end && (*it)[0] == cpt ? (*it)[1] : cpt;
}

// llama.cpp's is_chinese_char (BERT's CJK ranges, with its 0x2B920 for 0x2B820).
bool is_chinese_char(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}
}  // namespace

WpmTokenizer::WpmTokenizer(const TokenMap& token_to_id, int32_t unk, bool lowercase, bool strip_accents,
                           size_t max_token_len)
    : token_to_id_(token_to_id), unk_(unk), lowercase_(lowercase), strip_accents_(strip_accents),
      max_token_len_(max_token_len) {}

void WpmTokenizer::tokenize(std::string_view text, std::vector<int32_t>& out) const {
    // Normalize and split into words (llm_tokenizer_wpm_session::preprocess).
    std::vector<std::string> words(1);
    for (uint32_t cpt : unicode::decode_utf8(text)) {
        if (strip_accents_) cpt = lookup(kNfdFirst, cpt);
        const uint16_t f = unicode::flags(cpt);
        if (f & unicode::WHITESPACE) {
            if (!words.back().empty()) words.emplace_back();
            continue;
        }
        if (cpt == 0 || cpt == unicode::REPLACEMENT || (f & unicode::CONTROL)) continue;
        if (strip_accents_ && (f & unicode::ACCENT_MARK)) continue;
        std::string s;
        unicode::append_utf8(s, lowercase_ ? lookup(kLowercase, cpt) : cpt);
        if ((f & unicode::PUNCTUATION) || (cpt < 0x7F && (f & unicode::SYMBOL)) || is_chinese_char(cpt)) {
            if (!words.back().empty()) words.emplace_back();
            words.back() = s;  // a word of its own
            words.emplace_back();
        } else {
            words.back() += s;
        }
    }
    // Longest match from the left, with the phantom space in front of the word.
    for (const std::string& word : words) {
        if (word.empty()) continue;
        const std::string w = "\xE2\x96\x81" + word;
        const size_t n = w.size(), start = out.size();
        for (size_t i = 0; i < n; ++i) {
            bool match = false;
            for (size_t j = std::min(n, i + max_token_len_ + 1); j > i; --j) {
                const int32_t id = token_to_id_.find(std::string_view(w).substr(i, j - i));
                if (id >= 0) {
                    out.push_back(id);
                    match = true;
                    i = j - 1;
                    break;
                }
            }
            if (!match) {  // the whole word becomes [UNK]
                out.resize(start);
                break;
            }
        }
        if (out.size() == start) out.push_back(unk_);
    }
}

}  // namespace ei
