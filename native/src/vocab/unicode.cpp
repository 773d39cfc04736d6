#include "vocab/unicode.h"

#include <array>

namespace ei::unicode {

namespace {

struct Range {
    uint32_t first;
    uint16_t flags;
};

// {first code point, flags}, generated from Python's unicodedata (see the file's header).
constexpr Range kRanges[] = {
#include "vocab/unicode_data.inc"
};

// One uint16 per code point (2.2 MB): the pre-tokenizers ask for flags of every character.
std::vector<uint16_t> build_flag_table() {
    std::vector<uint16_t> table(MAX_CODEPOINT, UNDEFINED);
    constexpr size_t n = sizeof(kRanges) / sizeof(kRanges[0]);
    for (size_t i = 0; i < n; ++i) {
        const uint32_t end = i + 1 < n ? kRanges[i + 1].first : MAX_CODEPOINT;
        for (uint32_t c = kRanges[i].first; c < end; ++c) table[c] = kRanges[i].flags;
    }
    return table;
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// get U+0100.. in byte order.
struct ByteMap {
    std::array<std::string, 256> to_utf8;
    std::array<int16_t, 324> from_cpt;  // stand-ins are all below U+0100 + 68
    ByteMap() {
        from_cpt.fill(-1);
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            const uint32_t cpt = printable ? uint32_t(b) : uint32_t(256 + n++);
            append_utf8(to_utf8[b], cpt);
            from_cpt[cpt] = int16_t(b);
        }
    }
};

const ByteMap& byte_map() {
    static const ByteMap map;
    return map;
}

}  // namespace

uint16_t flags(uint32_t cpt) {
    static const std::vector<uint16_t> table = build_flag_table();
    return cpt < MAX_CODEPOINT ? table[cpt] : uint16_t(UNDEFINED);
}

size_t utf8_sequence(std::string_view s, size_t i, uint32_t* cpt) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    const size_t n = s.size();
    auto cont = [&](size_t j) { return j < n && (p[j] & 0xC0) == 0x80; };
    const uint8_t b = p[i];
    if (b < 0x80) {
        *cpt = b;
        return 1;
    }
    if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
        *cpt = uint32_t(b & 0x1F) << 6 | (p[i + 1] & 0x3F);
        return 2;
    }
    if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
        *cpt = uint32_t(b & 0x0F) << 12 | uint32_t(p[i + 1] & 0x3F) << 6 | (p[i + 2] & 0x3F);
        return 3;
    }
    if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
        *cpt = uint32_t(b & 0x07) << 18 | uint32_t(p[i + 1] & 0x3F) << 12 | uint32_t(p[i + 2] & 0x3F) << 6 |
               (p[i + 3] & 0x3F);
        return 4;
    }
    return 0;  // stray continuation byte, truncated sequence, 0xF8..0xFF
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
    std::vector<uint32_t> out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        uint32_t c = 0;
        const size_t len = utf8_sequence(s, i, &c);
        out.push_back(len == 0 || c >= MAX_CODEPOINT ? REPLACEMENT : c);
        i += len == 0 ? 1 : len;
    }
    return out;
}

void append_utf8(std::string& out, uint32_t c) {
    if (c < 0x80) {
        out.push_back(char(c));
    } else if (c < 0x800) {
        out.push_back(char(0xC0 | (c >> 6)));
        out.push_back(char(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(char(0xE0 | (c >> 12)));
        out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(char(0x80 | (c & 0x3F)));
    } else {
        out.push_back(char(0xF0 | (c >> 18)));
        out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(char(0x80 | (c & 0x3F)));
    }
}

const std::string& byte_to_utf8(uint8_t byte) { return byte_map().to_utf8[byte]; }

int utf8_to_byte(uint32_t cpt) { return cpt < 324 ? byte_map().from_cpt[cpt] : -1; }

}  // namespace ei::unicode
