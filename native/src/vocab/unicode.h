// Unicode helpers for the tokenizers: UTF-8 decode/encode with llama.cpp's error policy, the
// category flags the pre-tokenizer regexes ask about (\p{L}, \p{N}, \s, ...), and GPT-2's
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

// GPT-2 byte-level mapping: each byte has a printable stand-in character; vocabularies of
// "gpt2" tokenizers are written in those characters (space is "Ġ", newline "Ċ").
const std::string& byte_to_utf8(uint8_t byte);  // 1 or 2 bytes of UTF-8
// The byte a stand-in character stands for, or -1 if `cpt` is not one.
int utf8_to_byte(uint32_t cpt);

}  // namespace ei::unicode
