#include "vocab/bpe.h"

#include <queue>

#include "vocab/unicode.h"

namespace ei {

BpeTokenizer::BpeTokenizer(const TokenMap& token_to_id, int32_t n_vocab,
                           const std::vector<std::string_view>& merges, PreTokenizer pre)
    : token_to_id_(token_to_id), n_vocab_(n_vocab), pre_(std::move(pre)) {
    std::unordered_map<std::string, int32_t> extra;  // non-token strings of the merges
    auto symbol = [&](const std::string& s) {
        const int32_t id = token_to_id_.find(s);
        if (id >= 0) return id;
        auto ins = extra.emplace(s, n_vocab_ + int32_t(extra.size()));
        return ins.first->second;
    };
    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string_view m = merges[rank];
        const size_t sp = m.find(' ', 1);  // as llama.cpp: the first space after the first byte
        if (sp == std::string_view::npos) continue;
        const std::string left(m.substr(0, sp)), right(m.substr(sp + 1));
        const int32_t l = symbol(left), r = symbol(right);
        const int32_t result = symbol(left + right);
        const uint64_t key = uint64_t(uint32_t(l)) << 32 | uint32_t(r);
        merges_.emplace(key, Merge{int32_t(rank), result});  // the first (lowest) rank wins
    }
    for (int b = 0; b < 256; ++b) {
        const std::string& ch = unicode::byte_to_utf8(uint8_t(b));
        const int32_t id = token_to_id_.find(ch);
        auto ex = extra.find(ch);
        byte_symbol_[b] = id >= 0 ? id : ex != extra.end() ? ex->second : -1;
        for (char c : ch) {
            const int32_t one = token_to_id_.find(std::string_view(&c, 1));
            if (one >= 0) byte_fallback_[b].push_back(one);
        }
    }
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    const size_t n = word.size();
    if (n == 0) return;
    if (pre_.ignore_merges) {  // a word that is a whole token is taken as is
        std::string enc;
        for (char c : word) enc += unicode::byte_to_utf8(uint8_t(c));
        const int32_t id = token_to_id_.find(enc);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }

    struct Symbol {
        int32_t id;          // -1: this byte's character is in no token and no merge
        int32_t prev, next;  // neighbours in the chain, -1 at the ends
        uint32_t begin, len; // bytes of `word`; len 0 once merged into its left neighbour
    };
    struct Bigram {
        int32_t rank, left, right, left_id, right_id, result;
    };
    // Lowest rank first; among equal ranks the leftmost (llm_bigram_bpe::comparator).
    auto later = [](const Bigram& a, const Bigram& b) {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    std::vector<Symbol> sym(n);
    for (size_t i = 0; i < n; ++i) {
        sym[i] = {byte_symbol_[uint8_t(word[i])], int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1,
                  uint32_t(i), 1};
    }
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(later)> queue(later);
    auto try_add = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
        auto it = merges_.find(uint64_t(uint32_t(sym[l].id)) << 32 | uint32_t(sym[r].id));
        if (it != merges_.end()) queue.push({it->second.rank, l, r, sym[l].id, sym[r].id, it->second.result});
    };
    for (size_t i = 1; i < n; ++i) try_add(int32_t(i - 1), int32_t(i));

    while (!queue.empty()) {
        const Bigram bg = queue.top();
        queue.pop();
        Symbol& l = sym[bg.left];
        Symbol& r = sym[bg.right];
        // Outdated: one side was merged away or has grown since this pair was queued.
        if (l.len == 0 || r.len == 0 || l.id != bg.left_id || r.id != bg.right_id) continue;
        l.id = bg.result;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = bg.left;
        try_add(l.prev, bg.left);
        try_add(bg.left, l.next);
    }

    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        const Symbol& s = sym[i];
        if (s.id >= 0 && s.id < n_vocab_) {
            out.push_back(s.id);
        } else {
            for (uint32_t k = s.begin; k < s.begin + s.len; ++k) {
                const auto& fb = byte_fallback_[uint8_t(word[k])];
                out.insert(out.end(), fb.begin(), fb.end());
            }
        }
    }
}

void BpeTokenizer::tokenize(std::string_view text, std::vector<int32_t>& out) const {
    PreTokenized words;
    pre_tokenize(pre_, text, words);
    // Prose repeats its words: merge each distinct word once per call.
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;  // word -> [begin, end) of `ids`
    std::vector<int32_t> ids;
    uint32_t begin = 0;
    for (uint32_t end : words.word_ends) {
        const std::string_view word(words.normalized.data() + begin, end - begin);
        begin = end;
        auto it = cache.find(word);
        if (it == cache.end()) {
            const uint32_t first = uint32_t(ids.size());
            encode_word(word, ids);
            it = cache.emplace(word, std::make_pair(first, uint32_t(ids.size()))).first;
        }
        out.insert(out.end(), ids.begin() + it->second.first, ids.begin() + it->second.second);
    }
}

}  // namespace ei
