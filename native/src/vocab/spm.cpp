#include "vocab/spm.h"

#include <algorithm>
#include <queue>
#include <string>

#include "common/error.h"
#include "vocab/unicode.h"

namespace ei {

namespace {

const char kSpace[] = "\xE2\x96\x81";  // U+2581 '▁', SentencePiece's stand-in for ' '

}  // namespace

SpmTokenizer::SpmTokenizer(const TokenMap& token_to_id, std::vector<float> scores, int32_t unk)
    : token_to_id_(token_to_id), scores_(std::move(scores)) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = token_to_id_.find(std::string_view(name, 6));
        if (id < 0) {
            const char c = char(b);
            id = token_to_id_.find(std::string_view(&c, 1));
        }
        byte_token_[b] = id >= 0 ? id : unk;
    }
}

void SpmTokenizer::tokenize(std::string_view raw, bool space_prefix, std::vector<int32_t>& out) const {
    std::string text;
    text.reserve(raw.size() + 8);
    if (space_prefix) text += kSpace;
    for (char c : raw) {
        if (c == ' ') text += kSpace;
        else text += c;
    }
    if (text.empty()) return;

    struct Symbol {
        int32_t id;           // token of this text, -1 if none (a single character then)
        int32_t prev, next;   // neighbours in the chain, -1 at the ends
        uint32_t begin, len;  // bytes of `text`; len 0 once merged into its left neighbour
    };
    std::vector<Symbol> sym;
    sym.reserve(text.size());
    for (size_t off = 0; off < text.size();) {
        const size_t len = std::min(unicode::utf8_lead_length(text[off]), text.size() - off);
        const int32_t id = token_to_id_.find(std::string_view(text.data() + off, len));
        const int32_t i = int32_t(sym.size());
        off += len;
        sym.push_back({id, i - 1,
                       off == text.size() ? -1 : i + 1, uint32_t(off - len), uint32_t(len)});
    }

    struct Bigram {
        float score;
        int32_t left, right, id;
        uint32_t size;  // bytes of left + right when queued: a later change makes it stale
    };
    // Highest score first; among equal scores the leftmost (llm_bigram_spm::comparator).
    auto lower = [](const Bigram& a, const Bigram& b) {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
    // Any two neighbouring symbols whose joined text is a token may merge. The symbols are
    // adjacent in `text`, so the joined text is a view: no string is built per pair.
    auto try_add = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const uint32_t size = sym[l].len + sym[r].len;
        const int32_t id = token_to_id_.find(std::string_view(text.data() + sym[l].begin, size));
        if (id >= 0) queue.push({scores_[id], l, r, id, size});
    };
    for (int32_t i = 1; i < int32_t(sym.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const Bigram bg = queue.top();
        queue.pop();
        Symbol& l = sym[bg.left];
        Symbol& r = sym[bg.right];
        if (l.len == 0 || r.len == 0 || l.len + r.len != bg.size) continue;  // stale
        l.id = bg.id;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = bg.left;
        try_add(l.prev, bg.left);
        try_add(bg.left, l.next);
    }

    // A merged symbol is a token by construction, so llama.cpp's resegment (which splits a
    // non-token symbol back along its recorded merge) only ever meets single characters that
    // are not tokens: those go out as byte tokens.
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        const Symbol& s = sym[i];
        if (s.id >= 0) {
            out.push_back(s.id);
            continue;
        }
        for (uint32_t k = s.begin; k < s.begin + s.len; ++k) {
            const int32_t id = byte_token_[uint8_t(text[k])];
            if (id < 0)
                throw Error("SentencePiece vocabulary has no token for byte " + std::to_string(uint8_t(text[k])) +
                            " and no unknown token");
            out.push_back(id);
        }
    }
}

}  // namespace ei
