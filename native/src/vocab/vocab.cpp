// The vocabulary and its special-token logic, read from `tokenizer.ggml.*` the way llama.cpp's
// llama_vocab::impl::load does, so ids, BOS/EOS flags and the end-of-generation set agree with it.
#include "vocab/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "common/error.h"
#include "vocab/bpe.h"
#include "vocab/spm.h"
#include "vocab/ugm.h"
#include "vocab/unicode.h"
#include "vocab/wpm.h"

namespace ei {

namespace {

// llama.cpp's llama_token_attr: token types become bit sets, and load-time fixes add bits.
enum Attr : uint32_t {
    ATTR_UNDEFINED = 0,
    ATTR_UNKNOWN = 1u << 0,
    ATTR_UNUSED = 1u << 1,
    ATTR_NORMAL = 1u << 2,
    ATTR_CONTROL = 1u << 3,
    ATTR_USER_DEFINED = 1u << 4,
    ATTR_BYTE = 1u << 5,
    ATTR_LSTRIP = 1u << 7,  // special-token splitting eats the whitespace before the token
    ATTR_RSTRIP = 1u << 8,  // ... after it
};

uint32_t attr_of_type(int32_t type) {
    switch (type) {
        case TOKEN_NORMAL: return ATTR_NORMAL;
        case TOKEN_UNKNOWN: return ATTR_UNKNOWN;
        case TOKEN_CONTROL: return ATTR_CONTROL;
        case TOKEN_USER_DEFINED: return ATTR_USER_DEFINED;
        case TOKEN_UNUSED: return ATTR_UNUSED;
        case TOKEN_BYTE: return ATTR_BYTE;
        default: return ATTR_UNDEFINED;
    }
}

// Tokens llama.cpp treats as end of generation by their text (llama-vocab.cpp).
const char* const kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // <｜end▁of▁sentence｜>
    "[e~[",
};
// ... and the texts it takes for EOT when tokenizer.ggml.eot_token_id is absent.
const char* const kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>",
};
// FIM pad/repo/file-separator tokens also end generation.
const char* const kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const char* const kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const char* const kFimSepTexts[] = {"<|file_sep|>"};

// The lowest id among the tokens with one of these texts, -1 if none. Looking the few texts
// up, rather than comparing every token with every list, keeps loading 262k tokens fast.
template <size_t N>
int32_t first_of(const TokenMap& map, const char* const (&list)[N]) {
    int32_t best = -1;
    for (const char* t : list) {
        const int32_t id = map.find(t);
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    return best;
}

bool contains_any(const std::string& s, std::initializer_list<const char*> parts) {
    for (const char* p : parts)
        if (s.find(p) != std::string::npos) return true;
    return false;
}

// A fragment of the text being tokenized: raw bytes still to tokenize, or a special token.
struct Fragment {
    int32_t token;  // -1 for raw text
    size_t offset, length;
};

}  // namespace

struct Vocab::Impl {
    enum class Kind { BPE, SPM, WPM, UGM };

    std::string model, pre;
    Kind kind = Kind::BPE;
    std::vector<std::string> text;  // [n_tokens]; never resized after load (token_to_id views it)
    std::vector<uint32_t> attr;     // [n_tokens] Attr bits
    TokenMap token_to_id;
    int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    bool add_bos = false, add_eos = false;
    bool add_space_prefix = false;     // SPM, UGM: a space before the text and after special tokens
    bool add_sep = false;              // a separator between the two texts of a pair (rerank)
    std::vector<int32_t> eog;          // sorted
    std::vector<int32_t> special;      // control / user-defined / unknown, longest text first
    std::vector<std::string> piece;    // token_to_piece(id, special=true), precomputed
    std::unique_ptr<BpeTokenizer> bpe;
    std::unique_ptr<SpmTokenizer> spm;
    std::unique_ptr<WpmTokenizer> wpm;
    std::unique_ptr<UgmTokenizer> ugm;

    void load(const GgufFile& f);
    void load_bpe(const GgufFile& f);
    void load_spm(const GgufFile& f);
    void load_wpm(const GgufFile& f);
    void load_ugm(const GgufFile& f);
    void finish_load(const GgufFile& f);
    std::vector<float> load_scores(const GgufFile& f) const;
    void load_tokens(const GgufFile& f);
    void load_special_ids(const GgufFile& f);
    void find_special_by_text(const std::string& general_name, const std::string& arch);
    std::string make_piece(int32_t id) const;
    std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
    void check(int32_t id) const {
        if (id < 0 || size_t(id) >= text.size())
            throw Error("token id " + std::to_string(id) + " out of range [0, " + std::to_string(text.size()) + ")");
    }
};

void Vocab::Impl::load(const GgufFile& f) {
    model = f.get_string("tokenizer.ggml.model");
    const std::string pre_name = f.get_string("tokenizer.ggml.pre", "");
    pre = pre_name.empty() ? "default" : pre_name;

    if (model == "gpt2") {
        kind = Kind::BPE;
        load_bpe(f);
    } else if (model == "llama") {
        kind = Kind::SPM;
        load_spm(f);
    } else if (model == "bert") {
        kind = Kind::WPM;
        load_wpm(f);
    } else if (model == "t5") {
        kind = Kind::UGM;
        load_ugm(f);
    } else {
        throw Error("unsupported tokenizer model '" + gguf_printable(model) + "' (tokenizer.ggml.model in " + f.path() + ")");
    }
    finish_load(f);
}

void Vocab::Impl::load_bpe(const GgufFile& f) {
    // byte-level BPE: llama.cpp's defaults, then what the pre-tokenizer implies.
    PreTokenizer pre_tok = make_pre_tokenizer(f.get_string("tokenizer.ggml.pre", ""));  // fails before the big arrays
    bos = 11;
    eos = 11;
    add_bos = pre_tok.add_bos == 1;
    add_eos = false;
    if (pre_tok.no_bos) bos = -1;

    load_tokens(f);
    if (f.array_size("tokenizer.ggml.merges") < 0)
        f.fail("key 'tokenizer.ggml.merges'", "missing: a gpt2 (BPE) tokenizer needs its merges");
    bpe = std::make_unique<BpeTokenizer>(token_to_id, int32_t(text.size()),
                                         f.get_string_array("tokenizer.ggml.merges"), std::move(pre_tok));
    load_special_ids(f);
}

void Vocab::Impl::load_spm(const GgufFile& f) {
    // llama.cpp's defaults for the "llama" model: LLaMA's ids (unk 0, BOS 1, EOS 2), BOS added,
    // a space prefix; the file's keys override them. No pre-tokenizer: tokenizer.ggml.pre is
    // ignored, as llama.cpp does for SPM.
    unk = 0;
    bos = 1;
    eos = 2;
    add_bos = true;
    add_eos = false;
    add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
    load_tokens(f);
    load_special_ids(f);  // before the tokenizer: the unknown token stands in for bytes without a token
    spm = std::make_unique<SpmTokenizer>(token_to_id, load_scores(f), unk);
}

void Vocab::Impl::load_wpm(const GgufFile& f) {
    // llama.cpp's defaults for the "bert" model: [CLS] 101 as BOS, [UNK] 100, [SEP] 102, [PAD] 0,
    // [MASK] 103, no EOS; [CLS] ... [SEP] around the text whatever the add_*_token keys say (as
    // llama.cpp's tokenize for WPM: converters write add_eos with EOS = [SEP]). Lowercasing on unless the file says,
    // accents stripped where lowercasing is unless the file says.
    bos = 101;
    eos = -1;
    unk = 100;
    sep = 102;
    pad = 0;
    mask = 103;
    add_bos = true;
    add_eos = false;
    load_tokens(f);
    load_special_ids(f);
    const bool lowercase = f.get_bool("tokenizer.ggml.normalizer.lowercase", true);
    const bool strip_accents = f.get_bool("tokenizer.ggml.normalizer.strip_accents", lowercase);
    size_t max_len = 0;
    for (const std::string& t : text) max_len = std::max(max_len, t.size());
    wpm = std::make_unique<WpmTokenizer>(token_to_id, unk, lowercase, strip_accents, max_len);
}

void Vocab::Impl::load_ugm(const GgufFile& f) {
    // llama.cpp's defaults for the "t5" model: T5's ids (pad 0, EOS 1, unk 2), no BOS, EOS added;
    // the file's keys override them (XLM-RoBERTa files: <s> 0, <pad> 1, </s> 2, <unk> 3, BOS and
    // EOS added, </s> also the pair separator).
    pad = 0;
    eos = 1;
    unk = 2;
    add_bos = false;
    add_eos = true;
    add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", false);
    UgmTokenizer::Options options;
    options.add_space_prefix = add_space_prefix;
    options.remove_extra_whitespaces = f.get_bool("tokenizer.ggml.remove_extra_whitespaces", false);
    const char* const charsmap_key = "tokenizer.ggml.precompiled_charsmap";
    std::vector<uint8_t> charsmap;
    if (const GgufValue* v = f.find(charsmap_key)) {
        if (v->type != GgufType::ARRAY || (v->elem_type != GgufType::UINT8 && v->elem_type != GgufType::INT8))
            f.fail(std::string("key '") + charsmap_key + "'", "must be an array of bytes");
        charsmap.assign(v->elems, v->elems + v->count);
        if (!UgmTokenizer::charsmap_fits(charsmap))
            f.fail(std::string("key '") + charsmap_key + "'", "its trie size does not fit its " +
                                                                 std::to_string(charsmap.size()) + " bytes");
    }
    load_tokens(f);
    load_special_ids(f);
    if (unk < 0) f.fail("key 'tokenizer.ggml.unknown_token_id'", "a t5 (Unigram) tokenizer needs an unknown token");
    std::vector<UgmTokenizer::Role> roles(text.size());
    for (size_t id = 0; id < text.size(); ++id) {
        const uint32_t a = attr[id];
        roles[id] = (a & ATTR_NORMAL) ? UgmTokenizer::Role::normal
                    : (a & ATTR_USER_DEFINED) ? UgmTokenizer::Role::user_defined
                    : (a & ATTR_UNUSED) ? UgmTokenizer::Role::unused
                                        : UgmTokenizer::Role::other;
    }
    ugm = std::make_unique<UgmTokenizer>(token_to_id, text, std::move(roles), load_scores(f), unk, std::move(charsmap),
                                         options);
}

// tokenizer.ggml.scores: float32 or int32 (llama.cpp takes either); all 0 if absent.
std::vector<float> Vocab::Impl::load_scores(const GgufFile& f) const {
    const int64_t n = int64_t(text.size());
    const int64_t count = f.array_size("tokenizer.ggml.scores");
    if (count < 0) return std::vector<float>(size_t(n), 0.0f);
    if (count < n)
        f.fail("key 'tokenizer.ggml.scores'", std::to_string(count) + " entries for " + std::to_string(n) + " tokens");
    const GgufValue* v = f.find("tokenizer.ggml.scores");
    std::vector<float> scores;
    if (v->elem_type == GgufType::INT32) {
        for (int32_t s : f.get_int_array("tokenizer.ggml.scores")) scores.push_back(float(s));
    } else {
        scores = f.get_float_array("tokenizer.ggml.scores");  // names the key if of another type
    }
    scores.resize(size_t(n));
    return scores;
}

// What both kinds share, after the tokens and special ids are read.
void Vocab::Impl::finish_load(const GgufFile& f) {
    add_bos = f.get_bool("tokenizer.ggml.add_bos_token", add_bos);
    add_eos = f.get_bool("tokenizer.ggml.add_eos_token", add_eos);
    add_sep = f.get_bool("tokenizer.ggml.add_sep_token", kind == Kind::WPM);
    if (kind == Kind::WPM) {  // llama.cpp's WPM ignores the flags: [CLS] ... [SEP] with add_special
        add_bos = true;
        add_eos = false;
    }
    if (add_bos && bos < 0) f.fail("key 'tokenizer.ggml.add_bos_token'", "true, but tokenizer.ggml.bos_token_id is not set");
    if (add_eos && eos < 0) f.fail("key 'tokenizer.ggml.add_eos_token'", "true, but tokenizer.ggml.eos_token_id is not set");

    find_special_by_text(f.get_string("general.name", ""), f.get_string("general.architecture", ""));

    piece.resize(text.size());
    for (size_t id = 0; id < text.size(); ++id) piece[id] = make_piece(int32_t(id));
}

void Vocab::Impl::load_tokens(const GgufFile& f) {
    if (f.array_size("tokenizer.ggml.tokens") < 0) f.fail("key 'tokenizer.ggml.tokens'", "missing: no vocabulary");
    const std::vector<std::string_view> tokens = f.get_string_array("tokenizer.ggml.tokens");
    const size_t n = tokens.size();
    if (n == 0 || n > size_t(INT32_MAX)) f.fail("key 'tokenizer.ggml.tokens'", "vocabulary of " + std::to_string(n) + " tokens");
    std::vector<int32_t> types;
    if (f.array_size("tokenizer.ggml.token_type") >= 0) {
        types = f.get_int_array("tokenizer.ggml.token_type");
        if (types.size() < n)
            f.fail("key 'tokenizer.ggml.token_type'", std::to_string(types.size()) + " entries for " + std::to_string(n) + " tokens");
    }
    text.resize(n);
    attr.resize(n);
    for (size_t i = 0; i < n; ++i) {
        text[i] = tokens[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : std::string(tokens[i]);
        attr[i] = types.empty() ? ATTR_NORMAL : attr_of_type(types[i]);
    }
    const auto [first, dup] = token_to_id.build(text);
    if (dup >= 0)
        f.fail("key 'tokenizer.ggml.tokens'", "duplicate token '" + gguf_printable(text[dup]) + "' (ids " + std::to_string(first) +
                                                  " and " + std::to_string(dup) + ")");
}

void Vocab::Impl::load_special_ids(const GgufFile& f) {
    const std::pair<const char*, int32_t*> keys[] = {
        {"tokenizer.ggml.bos_token_id", &bos},          {"tokenizer.ggml.eos_token_id", &eos},
        {"tokenizer.ggml.eot_token_id", &eot},          {"tokenizer.ggml.eom_token_id", &eom},
        {"tokenizer.ggml.unknown_token_id", &unk},      {"tokenizer.ggml.seperator_token_id", &sep},
        {"tokenizer.ggml.padding_token_id", &pad},      {"tokenizer.ggml.mask_token_id", &mask},
        {"tokenizer.ggml.fim_pre_token_id", &fim_pre},  {"tokenizer.ggml.fim_suf_token_id", &fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &fim_mid},  {"tokenizer.ggml.fim_pad_token_id", &fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &fim_rep},  {"tokenizer.ggml.fim_sep_token_id", &fim_sep},
        {"tokenizer.ggml.prefix_token_id", &fim_pre},   {"tokenizer.ggml.suffix_token_id", &fim_suf},
        {"tokenizer.ggml.middle_token_id", &fim_mid},  // deprecated names
    };
    const int64_t n = int64_t(text.size());
    for (const auto& [key, id] : keys) {
        if (*id >= n) *id = -1;  // a default outside the vocabulary is disabled
        // An id outside the vocabulary keeps the default (llama.cpp warns).
        const int64_t v = f.get_int(key, -1);
        if (v >= 0 && v < n) *id = int32_t(v);
    }
}

// llama.cpp's load-time fixes by token text: EOT/EOM/FIM tokens, "unused" control tokens, the
// end-of-generation set, and per-model strip attributes.
void Vocab::Impl::find_special_by_text(const std::string& general_name, const std::string& arch) {
    const int32_t n = int32_t(text.size());
    // A token found by its text is made a control token (llama.cpp: "control-looking token").
    // llama.cpp walks an unordered map; here the lowest matching id wins.
    auto adopt = [&](int32_t& slot, int32_t id) {
        if (slot < 0 && id >= 0) {
            slot = id;
            attr[id] |= ATTR_CONTROL;
        }
    };
    static const char* const eom_texts[] = {"<|eom_id|>"};
    {
        static const char* const pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
            "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>", "\xE2\x96\x81<PRE>",
            "<|code_prefix|>", "<|prefix|>"};
        static const char* const suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
            "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>",
            "<|code_suffix|>", "<|suffix|>"};
        static const char* const mid_texts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
            "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>",
            "<|code_middle|>", "<|middle|>"};
        const std::pair<int32_t*, int32_t> found[] = {
            {&eot, first_of(token_to_id, kEotTexts)},        {&eom, first_of(token_to_id, eom_texts)},
            {&fim_pad, first_of(token_to_id, kFimPadTexts)}, {&fim_rep, first_of(token_to_id, kFimRepTexts)},
            {&fim_sep, first_of(token_to_id, kFimSepTexts)}, {&fim_pre, first_of(token_to_id, pre_texts)},
            {&fim_suf, first_of(token_to_id, suf_texts)},    {&fim_mid, first_of(token_to_id, mid_texts)},
        };
        for (const auto& [slot, id] : found) adopt(*slot, id);
    }
    for (int32_t id = 0; id < n; ++id)
        if ((attr[id] & ATTR_CONTROL) && text[id].find("unused") != std::string::npos) attr[id] |= ATTR_UNUSED;

    std::vector<bool> is_eog(size_t(n), false);
    for (int32_t id : {fim_pad, fim_rep, fim_sep})
        if (id >= 0) is_eog[id] = true;
    for (const char* t : kEogTexts) {
        const int32_t id = token_to_id.find(t);
        if (id >= 0) {
            is_eog[id] = true;
            attr[id] |= ATTR_CONTROL;
        }
    }
    // gpt-oss: these always render.
    for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
        const int32_t id = token_to_id.find(t);
        if (id >= 0) attr[id] = ATTR_USER_DEFINED;
    }
    for (int32_t id : {eos, eot, eom})
        if (id >= 0) is_eog[id] = true;
    auto eog_with = [&](const char* t) {
        const int32_t id = token_to_id.find(t);
        return id >= 0 && is_eog[id] ? id : -1;
    };
    // o200k_harmony / solar-open: "<|end|>" is not the end there.
    const int32_t end_id = eog_with("<|end|>");
    const bool has_call = eog_with("<|call|>") >= 0 || eog_with("<|calls|>") >= 0;
    if (end_id >= 0 && has_call && (eog_with("<|return|>") >= 0 || eog_with("<|flush|>") >= 0)) {
        is_eog[end_id] = false;
        attr[end_id] = ATTR_USER_DEFINED;
    }
    // gemma4 / paddleocr: "</s>" is not the end when "<|tool_response>" is.
    const int32_t s_id = eog_with("</s>");
    if (s_id >= 0 && eog_with("<|tool_response>") >= 0) {
        is_eog[s_id] = false;
        attr[s_id] = ATTR_NORMAL;
    }
    for (int32_t id = 0; id < n; ++id)
        if (is_eog[id]) eog.push_back(id);

    // Special tokens for splitting, longest text first (llama.cpp: cache_special_tokens).
    for (int32_t id = 0; id < n; ++id)
        if (attr[id] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) special.push_back(id);
    std::stable_sort(special.begin(), special.end(),
                     [&](int32_t a, int32_t b) { return text[a].size() > text[b].size(); });

    // Per-model strip attributes (llama.cpp sets them by name: they are not in GGUF files).
    std::string name = general_name;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    auto set_attr = [&](const char* t, uint32_t a, bool on) {
        const int32_t id = token_to_id.find(t);
        if (id >= 0) attr[id] = on ? attr[id] | a : attr[id] & ~a;
    };
    if (contains_any(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
        set_attr("<mask>", ATTR_LSTRIP, true);
    } else if (contains_any(name, {"phi-3", "phi3"})) {
        for (int32_t id : special) attr[id] |= ATTR_RSTRIP;
        set_attr("</s>", ATTR_RSTRIP, true);
        for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, ATTR_RSTRIP, false);
    } else if (contains_any(name, {"modern-bert"})) {
        set_attr("[MASK]", ATTR_LSTRIP, true);
    }
}

std::string Vocab::Impl::make_piece(int32_t id) const {
    const uint32_t a = attr[id];
    const std::string& t = text[id];
    if (a & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED)) return t;
    if ((a & ATTR_NORMAL) && kind != Kind::BPE) {  // '▁' back to ' '
        static const std::string_view kSpace = "\xE2\x96\x81";
        std::string out;
        out.reserve(t.size());
        size_t from = 0;
        for (size_t at; (at = t.find(kSpace, from)) != std::string::npos; from = at + kSpace.size())
            out.append(t, from, at - from).push_back(' ');
        return out.append(t, from, std::string::npos);
    }
    if (a & ATTR_NORMAL) {  // byte-level characters back to bytes
        std::string out;
        for (uint32_t cpt : unicode::decode_utf8(t)) {
            const int b = unicode::utf8_to_byte(cpt);
            if (b >= 0) {
                out.push_back(char(b));
            } else {  // not a byte-level character: llama.cpp's marker
                std::string ch;
                unicode::append_utf8(ch, cpt);
                out += "[UNK_BYTE_0x";
                for (unsigned char c : ch) {
                    char hex[3];
                    std::snprintf(hex, sizeof hex, "%02x", c);
                    out += hex;
                }
                out += t + "]";
            }
        }
        return out;
    }
    if ((a & ATTR_BYTE) && t.size() >= 5) return std::string(1, char(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
    return {};  // unused / undefined tokens render as nothing
}

// Splits off special tokens, longest first, as llama.cpp's tokenizer_st_partition: each token
// in turn is found (left to right) in every raw fragment still left. Without parse_special only
// user-defined tokens are split off.
std::vector<Fragment> Vocab::Impl::partition(std::string_view raw, bool parse_special) const {
    std::vector<Fragment> frags;
    if (raw.empty()) return frags;
    frags.push_back({-1, 0, raw.size()});
    // Which byte pairs occur at all: most special tokens are then skipped without a search.
    std::vector<bool> pairs(65536, false), bytes(256, false);
    for (size_t i = 0; i < raw.size(); ++i) {
        bytes[uint8_t(raw[i])] = true;
        if (i + 1 < raw.size()) pairs[uint8_t(raw[i]) << 8 | uint8_t(raw[i + 1])] = true;
    }
    auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    std::vector<Fragment> next;
    for (int32_t id : special) {
        const uint32_t a = attr[id];
        if (!parse_special && (a & (ATTR_CONTROL | ATTR_UNKNOWN))) continue;
        const std::string& t = text[id];
        if (t.size() > raw.size() || !bytes[uint8_t(t[0])]) continue;
        if (t.size() >= 2 && !pairs[uint8_t(t[0]) << 8 | uint8_t(t[1])]) continue;
        next.clear();
        for (const Fragment& fr : frags) {
            if (fr.token >= 0) {
                next.push_back(fr);
                continue;
            }
            size_t off = fr.offset, len = fr.length;
            while (true) {
                const size_t m = std::string_view(raw.data(), off + len).find(t, off);
                if (m == std::string_view::npos) {
                    next.push_back({-1, off, len});
                    break;
                }
                size_t left = m - off;
                if (a & ATTR_LSTRIP)
                    while (left > 0 && is_space(raw[off + left - 1])) --left;
                if (left > 0) next.push_back({-1, off, left});
                next.push_back({id, 0, 0});
                size_t r_off = m + t.size(), r_len = off + len - r_off;
                if (a & ATTR_RSTRIP)
                    while (r_len > 0 && is_space(raw[r_off])) ++r_off, --r_len;
                if (r_len == 0) break;
                off = r_off;
                len = r_len;
            }
        }
        frags.swap(next);
    }
    return frags;
}

Vocab::Vocab(const GgufFile& file) : impl_(std::make_unique<Impl>()) { impl_->load(file); }
Vocab::~Vocab() = default;

int32_t Vocab::n_tokens() const { return int32_t(impl_->text.size()); }
const std::string& Vocab::model() const { return impl_->model; }
const std::string& Vocab::pre() const { return impl_->pre; }

std::vector<int32_t> Vocab::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    const Impl& v = *impl_;
    std::vector<int32_t> out;
    if (add_special && v.add_bos) out.push_back(v.bos);
    // SPM: llama.cpp prefixes a space to the first raw fragment and to each one that follows a
    // special token (control or user-defined alike), not only at the start of the text.
    bool after_special = true;
    for (const Fragment& fr : v.partition(text, parse_special)) {
        if (fr.token >= 0) {
            out.push_back(fr.token);
            after_special = true;
        } else if (v.kind == Impl::Kind::BPE) {
            v.bpe->tokenize(text.substr(fr.offset, fr.length), out);
        } else if (v.kind == Impl::Kind::WPM) {
            v.wpm->tokenize(text.substr(fr.offset, fr.length), out);
        } else if (v.kind == Impl::Kind::UGM) {  // each fragment normalized alone, its space prefix too
            v.ugm->tokenize(text.substr(fr.offset, fr.length), out);
        } else {
            v.spm->tokenize(text.substr(fr.offset, fr.length), v.add_space_prefix && after_special, out);
            after_special = false;
        }
    }
    if (add_special && v.add_eos) out.push_back(v.eos);
    if (add_special && v.kind == Impl::Kind::WPM && v.sep >= 0) out.push_back(v.sep);  // [SEP] closes the text
    return out;
}

// llama.cpp's format_prompt_rerank without a rerank template: BOS first, EOS (else SEP) after
// each text, SEP between them, as the file's flags say; XLM-RoBERTa's <s> a </s></s> b </s>.
// WordPiece closes each text with [SEP] whatever the flags (its tokenize appends one): HF's
// [CLS] a [SEP] b [SEP].
std::vector<int32_t> Vocab::pair(const std::vector<int32_t>& first, const std::vector<int32_t>& second) const {
    const Impl& v = *impl_;
    std::vector<int32_t> out;
    const bool wpm = v.kind == Impl::Kind::WPM;
    const int32_t end = wpm ? v.sep : v.eos >= 0 ? v.eos : v.sep;
    const bool add_end = (wpm || v.add_eos) && end >= 0;
    if (v.add_bos && v.bos >= 0) out.push_back(v.bos);
    out.insert(out.end(), first.begin(), first.end());
    if (add_end) out.push_back(end);
    if (!wpm && v.add_sep && v.sep >= 0) out.push_back(v.sep);
    out.insert(out.end(), second.begin(), second.end());
    if (add_end) out.push_back(end);
    return out;
}

std::string Vocab::token_to_piece(int32_t id, bool special) const {
    impl_->check(id);
    if (!special && (impl_->attr[id] & (ATTR_UNKNOWN | ATTR_CONTROL))) return {};
    return impl_->piece[id];
}

// llama.cpp's llama_detokenize(remove_special=false, unparse_special=special), as its
// common_detokenize calls it: with add_space_prefix, one leading space of the *first* piece is
// dropped (the prefix tokenize added). So a text tokenized without BOS comes back exactly; with
// BOS first, the strip lands on BOS and the prefix space stays (" Hello"), as in llama.cpp.
// token_to_piece itself never strips, so streamed pieces concatenate to the same text.
std::string Vocab::detokenize(const std::vector<int32_t>& ids, bool special) const {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::string piece = token_to_piece(ids[i], special);
        const bool strip = i == 0 && impl_->add_space_prefix && !piece.empty() && piece[0] == ' ';
        out.append(piece, strip ? 1 : 0, std::string::npos);
    }
    return out;
}

const std::string& Vocab::token_text(int32_t id) const {
    impl_->check(id);
    return impl_->text[id];
}

int32_t Vocab::token_type(int32_t id) const {
    impl_->check(id);
    const uint32_t a = impl_->attr[id];  // the type after llama.cpp's load-time fixes
    if (a & ATTR_CONTROL) return TOKEN_CONTROL;
    if (a & ATTR_USER_DEFINED) return TOKEN_USER_DEFINED;
    if (a & ATTR_UNKNOWN) return TOKEN_UNKNOWN;
    if (a & ATTR_BYTE) return TOKEN_BYTE;
    if (a & ATTR_UNUSED) return TOKEN_UNUSED;
    if (a & ATTR_NORMAL) return TOKEN_NORMAL;
    return TOKEN_UNDEFINED;
}

int32_t Vocab::bos() const { return impl_->bos; }
int32_t Vocab::eos() const { return impl_->eos; }
bool Vocab::add_bos() const { return impl_->add_bos; }
bool Vocab::add_eos() const { return impl_->add_eos; }
bool Vocab::is_eog(int32_t id) const { return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id); }
const std::vector<int32_t>& Vocab::eog_ids() const { return impl_->eog; }

}  // namespace ei
