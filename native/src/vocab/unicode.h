// Unicode helpers for the tokenizers: UTF-8 decode/encode with llama.cpp's error policy, the
// category flags the pre-tokenizer regexes ask about (\p{L}, \p{N}, \s, \p{Lu}, ...), and GPT-2's
// byte <-> printable-character mapping used by byte-level BPE vocabularies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ei::unicode {

// Category flags of a code point. The values are shared with scripts/gen_unicode_data.py.
enum Flag : uint16_t {
    UNDEFINED = 0x01,    // unassigned (Cn)
    NUMBER = 0x02,       // \p{N}
    LETTER = 0x04,       // \p{L}
    SEPARATOR = 0x08,    // \p{Z}
    ACCENT_MARK = 0x10,  // \p{M}
    PUNCTUATION = 0x20,  // \p{P}
    SYMBOL = 0x40,       // \p{S}
    CONTROL = 0x80,      // \p{C} (assigned)
    WHITESPACE = 0x100,  // \s: the White_Space property
    UPPERCASE = 0x200,   // \p{Lu} or \p{Lt} (with LETTER): the o200k regex tells case apart
    LOWERCASE = 0x400,   // \p{Ll} (with LETTER); a letter with neither is \p{Lm} or \p{Lo}
};

constexpr uint32_t MAX_CODEPOINT = 0x110000;
constexpr uint32_t REPLACEMENT = 0xFFFD;

// Flags of `cpt`; UNDEFINED for anything past U+10FFFF. O(1): a table built on first use.
uint16_t flags(uint32_t cpt);

// Decodes UTF-8 the way llama.cpp does: a byte that does not start a complete sequence becomes
// U+FFFD and decoding resumes at the next byte (no exception leaves the tokenizer). Values past
// U+10FFFF also become U+FFFD, so every result can be encoded again.
std::vector<uint32_t> decode_utf8(std::string_view text);
void append_utf8(std::string& out, uint32_t cpt);
// Bytes of the well-formed UTF-8 sequence that starts at text[at] (its code point in *cpt), 0 if
// none starts there (llama.cpp's unicode_cpt_from_utf8 throws there). Not checked: overlong forms
// and values past U+10FFFF, as llama.cpp does not.
size_t utf8_sequence(std::string_view text, size_t at, uint32_t* cpt);
// Bytes in the UTF-8 character a lead byte starts, by its high nibble, as llama.cpp's
// unicode_len_utf8: no validation, so a stray continuation byte is a character of its own (the
// tokenizers step through text with it and only ever look the pieces up).
inline size_t utf8_lead_length(char lead) {
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[uint8_t(lead) >> 4];
}

// GPT-2 byte-level mapping: each byte has a printable stand-in character; vocabularies of
// "gpt2" tokenizers are written in those characters (space is "Ġ", newline "Ċ").
const std::string& byte_to_utf8(uint8_t byte);  // 1 or 2 bytes of UTF-8
// The byte a stand-in character stands for, or -1 if `cpt` is not one.
int utf8_to_byte(uint32_t cpt);

}  // namespace ei::unicode
