#include "vocab/ugm.h"

#include <algorithm>
#include <cfloat>
#include <cstring>

#include "common/error.h"
#include "vocab/unicode.h"

namespace ei {

namespace {
const char kSpace[] = "\xE2\x96\x81";  // U+2581 '▁', the escaped space
const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD, for a byte that starts no UTF-8 character
constexpr double kUnknownPenalty = 10.0;

uint32_t read_u32(const uint8_t* p) {  // the charsmap is little-endian, as GGUF files are
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
}  // namespace

bool UgmTokenizer::charsmap_fits(const std::vector<uint8_t>& charsmap) {
    return charsmap.size() >= 4 && size_t(read_u32(charsmap.data())) + 4 < charsmap.size();
}

UgmTokenizer::UgmTokenizer(const TokenMap& token_to_id, const std::vector<std::string>& texts, std::vector<Role> roles,
                           std::vector<float> scores, int32_t unk, std::vector<uint8_t> charsmap, Options options)
    : token_to_id_(token_to_id), texts_(texts), roles_(std::move(roles)), scores_(std::move(scores)), unk_(unk),
      options_(options), charsmap_(std::move(charsmap)) {
    float min_score = FLT_MAX;
    for (size_t id = 0; id < texts_.size(); ++id) {
        const Role r = roles_[id];
        if (r == Role::normal) min_score = std::min(min_score, scores_[id]);
        if (r != Role::other) max_token_len_ = std::max(max_token_len_, texts_[id].size());
        if (r == Role::user_defined) max_user_len_ = std::max(max_user_len_, texts_[id].size());
    }
    unknown_score_ = double(min_score - float(kUnknownPenalty));  // in float, as llama.cpp
    if (!charsmap_.empty()) {
        const size_t trie_bytes = read_u32(charsmap_.data());
        n_trie_nodes_ = trie_bytes / 4;
        replacements_offset_ = 4 + trie_bytes;
    }
}

uint32_t UgmTokenizer::trie_node(size_t index) const {
    if (index >= n_trie_nodes_) throw Error("the precompiled charsmap's trie points past its end");
    return read_u32(charsmap_.data() + 4 + 4 * index);
}

// One normalization step at text[at]: a user-defined token stays as it is; else the longest
// prefix the charsmap's trie knows becomes its replacement; else one UTF-8 character is kept, or
// one byte becomes U+FFFD.
UgmTokenizer::Prefix UgmTokenizer::normalize_prefix(std::string_view text, size_t at) const {
    for (size_t len = std::min(max_user_len_, text.size() - at); len > 0; --len) {
        const int32_t id = token_to_id_.find(text.substr(at, len));
        if (id >= 0 && roles_[id] == Role::user_defined) return {text.data() + at, len, len};
    }
    size_t best_len = 0, best_offset = 0;
    if (n_trie_nodes_ > 0) {
        // The trie is an XOR-compressed compact double array (Kanda 2018): a node packs BASE in
        // bits 10-30 (shifted left by 8 when bit 9 is set), LEAF in bit 8 and LCHECK in bits 0-7;
        // the child of node s for byte c is BASE[s] ^ c, and a leaf's BASE leads to the node whose
        // value (bits 0-30) is the offset of the replacement string.
        auto base = [&](size_t i) { const uint32_t n = trie_node(i); return (n >> 10) << ((n & (1u << 9)) >> 6); };
        size_t node = base(0);
        for (size_t pos = at; pos < text.size(); ++pos) {
            const uint8_t c = uint8_t(text[pos]);
            if (c == 0) break;
            node ^= c;
            const uint32_t packed = trie_node(node);
            if ((packed & ((1u << 31) | 0xFFu)) != c) break;  // LCHECK: not a child of the last node
            const bool leaf = (packed >> 8) & 1;
            node ^= base(node);
            if (leaf) {
                best_len = pos - at + 1;
                best_offset = trie_node(node) & ((1u << 31) - 1);
            }
        }
    }
    if (best_len > 0) {
        const size_t begin = replacements_offset_ + best_offset;
        if (begin >= charsmap_.size()) throw Error("the precompiled charsmap's replacement is past its end");
        const char* s = reinterpret_cast<const char*>(charsmap_.data() + begin);
        const size_t len = strnlen(s, charsmap_.size() - begin);
        if (begin + len == charsmap_.size()) throw Error("the precompiled charsmap has an unterminated replacement");
        return {s, len, best_len};
    }
    uint32_t cpt;
    const size_t len = unicode::utf8_sequence(text, at, &cpt);
    if (len > 0) return {text.data() + at, len, len};
    return {kReplacement, 3, 1};
}

// llama.cpp's normalize (spaces escaped: escape_whitespaces is always on for this tokenizer;
// treat_whitespace_as_suffix, which no converter writes, is not).
std::string UgmTokenizer::normalize(std::string_view text) const {
    std::string out;
    out.reserve(text.size() * 3);
    const bool merge_spaces = options_.remove_extra_whitespaces;
    bool space_prepended = false, in_word = false;
    for (size_t at = 0; at < text.size();) {
        const Prefix p = normalize_prefix(text, at);
        for (size_t i = 0; i < p.length; ++i) {
            const char c = p.text[i];
            if (c != ' ') {
                if (!in_word) {
                    in_word = true;
                    if ((options_.add_space_prefix && !space_prepended) || merge_spaces) {
                        out += kSpace;
                        space_prepended = true;
                    }
                }
                out.push_back(c);
            } else {
                in_word = false;
                if (!merge_spaces) out += kSpace;
            }
        }
        at += p.consumed;
    }
    return out;
}

void UgmTokenizer::tokenize(std::string_view raw, std::vector<int32_t>& out) const {
    const std::string text = normalize(raw);
    const size_t n = text.size();
    if (n == 0) return;
    // best[i]: the best segmentation of text[0, i) ends with token `id`, which starts at `from`.
    struct Best {
        int32_t id;
        size_t from;
        double score;  // double, as SentencePiece sums: the ids then equal the HF tokenizer's
    };
    std::vector<Best> best(n + 1, Best{unk_, 0, -DBL_MAX});
    best[0].score = 0.0;
    for (size_t at = 0; at < n;) {
        const size_t char_len = std::min(unicode::utf8_lead_length(text[at]), n - at);
        const double here = best[at].score;
        bool whole_char = false;  // a token covers exactly the character at `at`
        for (size_t len = 1; len <= std::min(max_token_len_, n - at); ++len) {
            const int32_t id = token_to_id_.find(std::string_view(text).substr(at, len));
            if (id < 0 || roles_[id] == Role::other) continue;
            if (len == char_len) whole_char = true;
            const double score = here + (roles_[id] == Role::user_defined ? 0.0 : double(scores_[id]));
            if (score > best[at + len].score) best[at + len] = {id, at, score};
        }
        if (!whole_char && here + unknown_score_ > best[at + char_len].score)
            best[at + char_len] = {unk_, at, here + unknown_score_};
        at += char_len;
    }
    // Back from the end; a run of <unk> becomes one.
    const size_t start = out.size();
    bool prev_unknown = false;
    for (size_t at = n;;) {
        const Best& b = best[at];
        const bool unknown = b.id == unk_;
        if (!(prev_unknown && unknown)) out.push_back(b.id);
        if (b.from == 0) break;
        prev_unknown = unknown;
        at = b.from;
    }
    std::reverse(out.begin() + std::ptrdiff_t(start), out.end());
}

}  // namespace ei
