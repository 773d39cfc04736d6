#include "vocab/pretokenize.h"

#include <algorithm>
#include <initializer_list>

#include "common/error.h"
#include "gguf/gguf.h"
#include "vocab/unicode.h"

namespace ei {

namespace {

using unicode::ACCENT_MARK;
using unicode::LETTER;
using unicode::LOWERCASE;
using unicode::NUMBER;
using unicode::PUNCTUATION;
using unicode::UPPERCASE;
using unicode::WHITESPACE;

// The names llama.cpp maps to each regex list (llama-vocab.cpp, llama_vocab::impl::load), for
// the lists implemented here. Others (deepseek, tekken, bloom, ...) are refused by name.
struct PreEntry {
    std::initializer_list<const char*> names;
    std::initializer_list<PreSplit> splits;
    bool ignore_merges;
    int add_bos;
    bool no_bos;
};

const PreEntry kPreTokenizers[] = {
    // LLAMA_VOCAB_PRE_TYPE_DEFAULT
    {{"default"}, {PreSplit::PUNCT_RUN, PreSplit::GPT2, PreSplit::DIGIT_RUN, PreSplit::ASCII_DIGIT3},
     false, -1, false},
    // LLAMA3: ignore_merges, add_bos
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano"},
     {PreSplit::LLAMA3}, true, 1, false},
    // DBRX, SMAUG: the Llama-3 regex without the flags
    {{"dbrx", "smaug-bpe"}, {PreSplit::LLAMA3}, false, -1, false},
    // CHATGLM4: the Llama-3 regex, no BOS token
    {{"glm4", "chatglm-bpe"}, {PreSplit::LLAMA3}, false, -1, true},
    // GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING
    {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
      "mellum", "modern-bert", "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling"},
     {PreSplit::GPT2}, false, -1, false},
    // STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2: digits alone, then GPT-2
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
     {PreSplit::DIGIT, PreSplit::GPT2}, false, -1, false},
    // QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN
    {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"},
     {PreSplit::QWEN2}, false, -1, false},
    // GPT4O, MINIMAX_M2: the o200k regex (gpt-oss's o200k_harmony too)
    {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {PreSplit::O200K}, false, -1, false},
    // FALCON
    {{"falcon"}, {PreSplit::PUNCT_RUN_BT, PreSplit::GPT2, PreSplit::ASCII_DIGIT3}, false, -1, false},
};

constexpr uint32_t OUT_OF_RANGE = 0xFFFFFFFF;

// One piece [ini, end) of the code points being split; appends the lengths of its sub-pieces.
struct Piece {
    const uint32_t* cpts;
    const uint16_t* fl;
    size_t ini, end;
    std::vector<uint32_t>& out;
    size_t prev;

    Piece(const uint32_t* c, const uint16_t* f, size_t i, size_t e, std::vector<uint32_t>& o)
        : cpts(c), fl(f), ini(i), end(e), out(o), prev(i) {}
    // Look-arounds stop at the piece's end: flags 0 and OUT_OF_RANGE past it.
    uint16_t F(size_t p) const { return p < end ? fl[p] : 0; }
    uint32_t C(size_t p) const { return p < end ? cpts[p] : OUT_OF_RANGE; }
    void add(size_t e) {
        if (e > prev) out.push_back(uint32_t(e - prev));
        prev = e;
    }
};

bool is_other(uint16_t f) { return f != 0 && !(f & (WHITESPACE | LETTER | NUMBER)); }  // [^\s\p{L}\p{N}]
uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d (case-insensitive if asked): the match length at pos, or 0.
size_t contraction(const Piece& p, size_t pos, bool any_case) {
    if (p.C(pos) != '\'' || pos + 1 >= p.end) return 0;
    auto low = [&](uint32_t c) { return any_case ? ascii_lower(c) : c; };
    const uint32_t n = low(p.C(pos + 1));
    if (n == 's' || n == 't' || n == 'm' || n == 'd') return 2;
    if (pos + 2 >= p.end) return 0;
    const uint32_t nn = low(p.C(pos + 2));
    if ((n == 'r' && nn == 'e') || (n == 'v' && nn == 'e') || (n == 'l' && nn == 'l')) return 3;
    return 0;
}

// [^\s\p{L}\p{N}]+[\r\n]* ([\r\n/]* if `slash`) from pos: the end of the match.
size_t other_run_end(const Piece& p, size_t pos, bool slash) {
    while (is_other(p.F(pos))) ++pos;
    while (p.C(pos) == '\r' || p.C(pos) == '\n' || (slash && p.C(pos) == '/')) ++pos;
    return pos;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ from pos (one character if none matches): the end of the match.
size_t whitespace_end(const Piece& p, size_t pos) {
    size_t nws = 0, last_rn = 0;
    while (p.F(pos + nws) & WHITESPACE) {
        const uint32_t c = p.C(pos + nws);
        if (c == '\r' || c == '\n') last_rn = pos + nws + 1;
        ++nws;
    }
    if (last_rn > 0) return last_rn;                          // \s*[\r\n]+
    if (nws > 1 && pos + nws < p.end) return pos + nws - 1;  // \s+(?!\S): the last one starts the next word
    return pos + std::max<size_t>(nws, 1);
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(Piece& p) {
    size_t pos = p.ini;
    while (pos < p.end) {
        const uint32_t c = p.cpts[pos];
        const uint16_t f = p.fl[pos];
        if (size_t n = contraction(p, pos, false)) {
            p.add(pos += n);
            continue;
        }
        const uint16_t f2 = c == ' ' ? p.F(pos + 1) : f;
        const uint16_t cls = (f2 & LETTER) ? LETTER : (f2 & NUMBER) ? NUMBER : 0;
        if (cls) {  // ' ?\p{L}+' or ' ?\p{N}+'
            pos += (c == ' ');
            while (p.F(pos) & cls) ++pos;
            p.add(pos);
            continue;
        }
        if (is_other(f2)) {
            pos += (c == ' ');
            while (is_other(p.F(pos))) ++pos;
            p.add(pos);
            continue;
        }
        size_t nws = 0;
        while (p.F(pos + nws) & WHITESPACE) ++nws;
        if (nws > 1 && pos + nws < p.end) {  // \s+(?!\S): leave the last one to the next word
            p.add(pos += nws - 1);
        } else if (nws > 0) {
            p.add(pos += nws);
        } else {
            p.add(++pos);
        }
    }
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(Piece& p, size_t max_digits) {
    size_t pos = p.ini;
    while (pos < p.end) {
        const uint32_t c = p.cpts[pos];
        const uint16_t f = p.fl[pos];
        if (size_t n = contraction(p, pos, true)) {
            p.add(pos += n);
            continue;
        }
        if (!(c == '\r' || c == '\n' || (f & NUMBER)) && ((f & LETTER) || (p.F(pos + 1) & LETTER))) {
            ++pos;
            while (p.F(pos) & LETTER) ++pos;
            p.add(pos);
            continue;
        }
        if (f & NUMBER) {
            size_t ini = pos;
            while (p.F(pos) & NUMBER) {
                if (++pos - ini >= max_digits) {
                    p.add(pos);
                    ini = pos;
                }
            }
            p.add(pos);
            continue;
        }
        const uint16_t f2 = c == ' ' ? p.F(pos + 1) : f;
        if (!(f2 & (WHITESPACE | LETTER | NUMBER))) {  // f != 0: pos is inside the piece
            p.add(pos = other_run_end(p, pos + (c == ' '), false));
            continue;
        }
        p.add(pos = whitespace_end(p, pos));
    }
}

// The o200k regex's letter classes: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] ("upper") and
// [\p{Ll}\p{Lm}\p{Lo}\p{M}] ("lower"). Caseless letters and marks are in both.
bool is_upper_cls(uint16_t f) { return ((f & LETTER) && !(f & LOWERCASE)) || (f & ACCENT_MARK); }
bool is_lower_cls(uint16_t f) { return ((f & LETTER) && !(f & UPPERCASE)) || (f & ACCENT_MARK); }
bool is_word_prefix(const Piece& p, size_t pos) {  // [^\r\n\p{L}\p{N}]
    const uint32_t c = p.C(pos);
    return p.F(pos) != 0 && !(p.F(pos) & (LETTER | NUMBER)) && c != '\r' && c != '\n';
}

template <typename Pred>
size_t run_end(const Piece& p, size_t pos, Pred pred) {
    while (pred(p.F(pos))) ++pos;  // F is 0 past the piece: no class holds there
    return pos;
}

// The end of upper*lower+ (upper_first false) or upper+lower* (true) matched at s, or 0 for no
// match, as a backtracking regex finds it: the greedy upper run gives back characters until a
// lower one can follow. The optional contraction is added by the caller.
size_t o200k_letters(const Piece& p, size_t s, bool upper_first) {
    const size_t u = run_end(p, s, is_upper_cls);
    if (is_lower_cls(p.F(u))) return run_end(p, u, is_lower_cls);  // u holds a \p{Ll}
    if (upper_first) return u > s ? u : 0;
    // Every character of [s, u) is "upper"; the last one that is also "lower" can be the
    // lower+ (it is followed by a pure upper one or by u, neither of which is "lower").
    for (size_t b = u; b > s; --b)
        if (is_lower_cls(p.F(b - 1))) return b;
    return 0;
}

// The o200k regex's (?i:'s|'t|'re|'ve|'m|'ll|'d): Unicode case folding also takes U+017F (long
// s) for 's'. (The Llama-3 splitter keeps ASCII folding, as llama.cpp's does.)
size_t o200k_contraction(const Piece& p, size_t pos) {
    if (p.C(pos) == '\'' && p.C(pos + 1) == 0x17F) return 2;
    return contraction(p, pos, true);
}

// The o200k regex (see PreSplit::O200K). The two word alternatives are tried in order, each
// first with the one-character prefix and then without it: they differ only where the
// character at pos is both a possible prefix and a letter-class one, i.e. a combining mark.
// This is the regex as tokenizer.json states it (and as the model's tokenizer ran it);
// llama.cpp runs an ASCII-case approximation through std::regex that leaves \p{M} out of words
// and splits words mixing non-ASCII and ASCII capitals ("ÉCOLE" -> "É" "COLE").
void split_o200k(Piece& p) {
    size_t pos = p.ini;
    while (pos < p.end) {
        const uint32_t c = p.cpts[pos];
        const uint16_t f = p.fl[pos];
        size_t word = 0;
        for (bool upper_first : {false, true}) {
            if (is_word_prefix(p, pos)) word = o200k_letters(p, pos + 1, upper_first);
            if (!word) word = o200k_letters(p, pos, upper_first);
            if (word) break;
        }
        if (word) {
            p.add(pos = word + o200k_contraction(p, word));
            continue;
        }
        if (f & NUMBER) {  // \p{N}{1,3}
            const size_t e = run_end(p, pos, [](uint16_t g) { return (g & NUMBER) != 0; });
            p.add(pos = std::min(e, pos + 3));
            continue;
        }
        const uint16_t f2 = c == ' ' ? p.F(pos + 1) : f;
        if (is_other(f2)) {  // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
            p.add(pos = other_run_end(p, pos + (c == ' '), true));
            continue;
        }
        p.add(pos = whitespace_end(p, pos));
    }
}

// A simple regex found left to right (std::regex_iterator): the text between matches and each
// match become pieces. `match(pos)` is the match length at pos, 0 for none.
template <typename Match>
void split_matches(Piece& p, Match match) {
    size_t pos = p.ini;
    while (pos < p.end) {
        if (size_t n = match(pos)) {
            p.add(pos);
            p.add(pos += n);
        } else {
            ++pos;
        }
    }
    p.add(p.end);
}

template <typename Pred>
size_t run_length(const Piece& p, size_t pos, Pred pred) {
    size_t n = 0;
    while (pos + n < p.end && pred(pos + n)) ++n;
    return n;
}

void split_piece(PreSplit kind, Piece& p) {
    switch (kind) {
        case PreSplit::GPT2: return split_gpt2(p);
        case PreSplit::LLAMA3: return split_llama3(p, 3);
        case PreSplit::QWEN2: return split_llama3(p, 1);
        case PreSplit::O200K: return split_o200k(p);
        case PreSplit::DIGIT:
            return split_matches(p, [&](size_t i) { return size_t((p.fl[i] & NUMBER) != 0); });
        case PreSplit::DIGIT_RUN:
            return split_matches(p, [&](size_t i) {
                return run_length(p, i, [&](size_t j) { return (p.fl[j] & NUMBER) != 0; });
            });
        case PreSplit::ASCII_DIGIT3:
            return split_matches(p, [&](size_t i) -> size_t {
                auto dig = [&](size_t j) { return j < p.end && p.cpts[j] >= '0' && p.cpts[j] <= '9'; };
                return dig(i) && dig(i + 1) && dig(i + 2) ? 3 : 0;
            });
        case PreSplit::PUNCT_RUN:
        case PreSplit::PUNCT_RUN_BT: {
            const bool bt = kind == PreSplit::PUNCT_RUN_BT;
            auto punct = [&](size_t j) {
                const uint32_t c = p.cpts[j];
                return (p.fl[j] & PUNCTUATION) || c == '$' || c == '+' || c == '<' || c == '=' ||
                       c == '>' || c == '^' || c == '~' || c == '|' || (bt && c == '`');
            };
            return split_matches(p, [&](size_t i) { return run_length(p, i, punct); });
        }
    }
}

}  // namespace

PreTokenizer make_pre_tokenizer(const std::string& name) {
    const std::string key = name.empty() ? "default" : name;
    for (const PreEntry& e : kPreTokenizers) {
        for (const char* n : e.names) {
            if (key == n) {
                PreTokenizer pre;
                pre.name = key;
                pre.splits.assign(e.splits.begin(), e.splits.end());
                pre.ignore_merges = e.ignore_merges;
                pre.add_bos = e.add_bos;
                pre.no_bos = e.no_bos;
                return pre;
            }
        }
    }
    std::string known;
    for (const std::string& n : supported_pre_tokenizers()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unsupported pre-tokenizer '" + gguf_printable(name) +
                "' (tokenizer.ggml.pre): unknown to llama.cpp or not implemented here; supported: " + known);
}

std::vector<std::string> supported_pre_tokenizers() {
    std::vector<std::string> names;
    for (const PreEntry& e : kPreTokenizers) names.insert(names.end(), e.names.begin(), e.names.end());
    return names;
}

void pre_tokenize(const PreTokenizer& pre, std::string_view text, PreTokenized& out) {
    const std::vector<uint32_t> cpts = unicode::decode_utf8(text);
    std::vector<uint16_t> fl(cpts.size());
    for (size_t i = 0; i < cpts.size(); ++i) fl[i] = unicode::flags(cpts[i]);

    // Piece lengths in code points; each split refines every piece of the previous one.
    std::vector<uint32_t> pieces, next;
    if (!cpts.empty()) pieces.push_back(uint32_t(cpts.size()));
    for (PreSplit kind : pre.splits) {
        next.clear();
        size_t start = 0;
        for (uint32_t len : pieces) {
            Piece p(cpts.data(), fl.data(), start, start + len, next);
            split_piece(kind, p);
            start += len;
        }
        pieces.swap(next);
    }

    // Re-encode (replacing invalid UTF-8) and turn code point lengths into byte offsets.
    out.normalized.clear();
    out.normalized.reserve(text.size());
    out.word_ends.clear();
    out.word_ends.reserve(pieces.size());
    size_t ci = 0;
    for (uint32_t len : pieces) {
        for (size_t e = ci + len; ci < e; ++ci) unicode::append_utf8(out.normalized, cpts[ci]);
        out.word_ends.push_back(uint32_t(out.normalized.size()));
    }
}

}  // namespace ei
