// GGUF reader (versions 2 and 3, little-endian) over a read-only mapping.
//
// Layout: "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type, value)
//         | n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset)
//         | padding to `general.alignment` (default 32) | tensor data.
// A string is u64 length + bytes; an array is u32 element type + u64 count + elements.
//
// The file is untrusted. Every read goes through a Cursor that checks it against the end of the
// mapping, and every count is checked against the bytes left *before* anything is sized from it,
// so a hostile count can neither read out of bounds nor make us allocate. Arrays are validated
// once at open (string arrays by walking their length records) and then left in the mapping:
// the 262k-entry vocabularies cost one linear walk, not 262k allocations.
#include "gguf/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "quant/types.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader decodes little-endian files by memcpy; a big-endian host needs byte swaps"
#endif

namespace ei {

namespace {

constexpr uint32_t kMaxDims = 4;                 // ggml's GGML_MAX_DIMS
constexpr uint64_t kMaxKeyBytes = 65535;         // the GGUF spec's limit for keys
constexpr uint64_t kMaxTensorNameBytes = 255;    // ggml allows 63; a little slack, still sane
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kNumValueTypes = 13;          // GgufType::UINT8 .. FLOAT64
// Counts are bounded by the file size, but a large file with a lying count could still ask for
// gigabytes of entries up front; reserve at most this many and let real entries grow the rest.
constexpr uint64_t kReserveCap = 1 << 16;
// Smallest possible encodings, used to bound counts before looping over them.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;          // key length, 1-byte key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // 1-byte name, 1 dim

std::string num(uint64_t v) { return std::to_string(v); }

// Length of the well-formed UTF-8 sequence at p[0..n), or 0 if it is not one (Unicode Table 3-7:
// no overlongs, no surrogates, nothing above U+10FFFF -- what Python's strict decoder accepts).
size_t utf8_sequence(const uint8_t* p, size_t n) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    if (n < len || p[1] < lo || p[1] > hi) return 0;
    for (size_t k = 2; k < len; ++k)
        if ((p[k] & 0xC0) != 0x80) return 0;
    return len;
}

bool is_utf8(std::string_view s) {
    const uint8_t* p = (const uint8_t*)s.data();
    for (size_t k = 0, len; k < s.size(); k += len)
        if ((len = utf8_sequence(p + k, s.size() - k)) == 0) return false;
    return true;
}

std::string key_field(std::string_view key) { return "key '" + gguf_printable(key) + "'"; }
std::string tensor_field(std::string_view name) { return "tensor '" + gguf_printable(name) + "'"; }

bool is_integer(GgufType t) {
    switch (t) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
        case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
            return true;
        default:
            return false;
    }
}

bool is_float(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }

// Encoded size of a fixed-size value type; 0 for STRING and ARRAY (variable length).
size_t scalar_size(GgufType t) {
    switch (t) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
        case GgufType::UINT16: case GgufType::INT16: return 2;
        case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
        case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
        default: return 0;
    }
}

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Decodes a fixed-size scalar of type t at p (caller has bounds-checked scalar_size(t) bytes).
GgufValue decode_scalar(GgufType t, const uint8_t* p) {
    GgufValue v;
    v.type = t;
    switch (t) {
        case GgufType::UINT8: v.i = load<uint8_t>(p); break;
        case GgufType::INT8: v.i = load<int8_t>(p); break;
        case GgufType::UINT16: v.i = load<uint16_t>(p); break;
        case GgufType::INT16: v.i = load<int16_t>(p); break;
        case GgufType::UINT32: v.i = load<uint32_t>(p); break;
        case GgufType::INT32: v.i = load<int32_t>(p); break;
        case GgufType::BOOL: v.i = load<uint8_t>(p); break;
        case GgufType::INT64: v.i = load<int64_t>(p); break;
        case GgufType::UINT64:
            v.u = load<uint64_t>(p);
            // `i` mirrors `u` only when it fits; get_int checks `u` itself.
            v.i = v.u <= (uint64_t)std::numeric_limits<int64_t>::max() ? (int64_t)v.u : 0;
            break;
        case GgufType::FLOAT32: v.f = load<float>(p); break;
        case GgufType::FLOAT64: v.f = load<double>(p); break;
        default: break;
    }
    return v;
}

// Describes a value's type for error messages: "uint32", "string", "array of string".
std::string type_desc(const GgufValue& v) {
    if (v.type == GgufType::ARRAY) return std::string("array of ") + gguf_type_name(v.elem_type);
    return gguf_type_name(v.type);
}

// A bounds-checked read position in the mapping. `where` names the thing being read ("header",
// "key 'general.name'", "tensor 'output.weight'") so errors can say which field is wrong.
class Cursor {
public:
    Cursor(const GgufFile& file, const uint8_t* base, size_t size)
        : file_(file), base_(base), size_(size) {}

    size_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }
    const uint8_t* here() const { return base_ + pos_; }

    [[noreturn]] void fail(const std::string& where, const std::string& what) const {
        file_.fail(where, what + " (at byte offset " + num(pos_) + ")");
    }

    // Ensures n more bytes exist before `what` is read.
    void need(uint64_t n, const std::string& where, const char* what) const {
        if (n > left())
            fail(where, std::string(what) + ": needs " + num(n) + " bytes but the file ends " +
                            num(left()) + " bytes later (size " + num(size_) + ")");
    }

    template <class T>
    T read(const std::string& where, const char* what) {
        need(sizeof(T), where, what);
        T v = load<T>(here());
        pos_ += sizeof(T);
        return v;
    }

    void skip(uint64_t n, const std::string& where, const char* what) {
        need(n, where, what);
        pos_ += n;
    }

    // A u64-length-prefixed string; the length is checked against max_len and the file.
    std::string_view read_string(const std::string& where, const char* what, uint64_t max_len) {
        uint64_t len = read<uint64_t>(where, what);
        if (len > max_len)
            fail(where, std::string(what) + " length " + num(len) + " exceeds the limit of " +
                            num(max_len) + " bytes");
        if (len > left())
            fail(where, std::string(what) + " length " + num(len) + " runs past the end of the file (" +
                            num(left()) + " bytes left, size " + num(size_) + ")");
        std::string_view s((const char*)here(), (size_t)len);
        pos_ += len;
        return s;
    }

private:
    const GgufFile& file_;
    const uint8_t* base_;
    size_t size_;
    size_t pos_ = 0;
};

GgufType read_value_type(Cursor& c, const std::string& where, const char* what) {
    uint32_t t = c.read<uint32_t>(where, what);
    if (t >= kNumValueTypes) c.fail(where, std::string(what) + " " + num(t) + " is not a GGUF value type");
    return (GgufType)t;
}

// Validates an array's elements in place and returns the value pointing at them.
GgufValue read_array(Cursor& c, const std::string& where) {
    GgufValue v;
    v.type = GgufType::ARRAY;
    v.elem_type = read_value_type(c, where, "array element type");
    // llama.cpp's reader has no use for nested arrays and rejects them too.
    if (v.elem_type == GgufType::ARRAY) c.fail(where, "arrays of arrays are not supported");
    v.count = c.read<uint64_t>(where, "array count");
    v.elems = c.here();

    if (v.elem_type == GgufType::STRING) {
        // Each element is at least its 8-byte length: bound the count before walking it.
        if (v.count > c.left() / 8)
            c.fail(where, "array of " + num(v.count) + " strings cannot fit in the " + num(c.left()) +
                              " bytes left in the file");
        for (uint64_t k = 0; k < v.count; ++k) {
            uint64_t len = c.read<uint64_t>(where, "string array element length");
            if (len > c.left())
                c.fail(where, "string array element " + num(k) + " has length " + num(len) +
                                  ", past the end of the file (" + num(c.left()) + " bytes left)");
            c.skip(len, where, "string array element");
        }
        return v;
    }

    size_t size = scalar_size(v.elem_type);
    if (v.count > c.left() / size)
        c.fail(where, "array of " + num(v.count) + " " + gguf_type_name(v.elem_type) + " elements (" +
                          num(size) + " bytes each) runs past the end of the file (" + num(c.left()) +
                          " bytes left)");
    if (v.elem_type == GgufType::BOOL) {
        for (uint64_t k = 0; k < v.count; ++k)
            if (v.elems[k] > 1)
                c.fail(where, "bool array element " + num(k) + " is " + num(v.elems[k]) + ", expected 0 or 1");
    }
    c.skip(v.count * size, where, "array elements");
    return v;
}

GgufValue read_value(Cursor& c, GgufType type, const std::string& where) {
    if (type == GgufType::ARRAY) return read_array(c, where);
    if (type == GgufType::STRING) {
        GgufValue v;
        v.type = type;
        v.str = c.read_string(where, "string value", std::numeric_limits<uint64_t>::max());
        return v;
    }
    size_t size = scalar_size(type);
    c.need(size, where, "value");
    GgufValue v = decode_scalar(type, c.here());
    if (type == GgufType::BOOL && v.i > 1)
        c.fail(where, "bool value is " + num((uint64_t)v.i) + ", expected 0 or 1");
    c.skip(size, where, "value");
    return v;
}

// Element count and byte size of a tensor, each checked for overflow.
void compute_geometry(const Cursor& c, GgufTensor& t, const std::string& where) {
    const TypeInfo& ti = type_info(t.type);
    if (t.ne[0] % ti.block_size != 0)
        c.fail(where, "row length ne[0]=" + num((uint64_t)t.ne[0]) + " is not a multiple of the block size " +
                          num((uint64_t)ti.block_size) + " of type " + ti.name);
    int64_t n = 1;
    for (int64_t d : t.ne)
        if (__builtin_mul_overflow(n, d, &n)) c.fail(where, "element count overflows a 64-bit integer");
    uint64_t bytes = (uint64_t)(t.ne[0] / ti.block_size);
    bool overflow = __builtin_mul_overflow(bytes, (uint64_t)ti.type_size, &bytes);
    for (int d = 1; d < 4; ++d) overflow = overflow || __builtin_mul_overflow(bytes, (uint64_t)t.ne[d], &bytes);
    if (overflow || bytes > std::numeric_limits<size_t>::max())
        c.fail(where, "byte size overflows a 64-bit integer");
    t.nbytes = (size_t)bytes;
}

GgufTensor read_tensor_info(Cursor& c, uint64_t index) {
    GgufTensor t;
    std::string where = "tensor #" + num(index);
    std::string_view name = c.read_string(where, "name", kMaxTensorNameBytes);
    if (name.empty()) c.fail(where, "empty tensor name");
    t.name = std::string(name);
    where = tensor_field(t.name);
    // Names are looked up by the text callers spell, so they must be text.
    if (!is_utf8(name)) c.fail(where, "tensor name is not valid UTF-8");

    t.n_dims = c.read<uint32_t>(where, "n_dims");
    if (t.n_dims == 0 || t.n_dims > kMaxDims)
        c.fail(where, "n_dims is " + num(t.n_dims) + ", expected 1.." + num(kMaxDims));
    for (uint32_t d = 0; d < t.n_dims; ++d) {
        uint64_t ne = c.read<uint64_t>(where, "dimension");
        if (ne > (uint64_t)std::numeric_limits<int64_t>::max())
            c.fail(where, "dimension " + num(d) + " is " + num(ne) + ", larger than a signed 64-bit integer");
        t.ne[d] = (int64_t)ne;
    }
    t.type = c.read<uint32_t>(where, "type");
    if (!type_known(t.type)) c.fail(where, "unknown tensor type " + num(t.type));
    t.offset = c.read<uint64_t>(where, "offset");
    compute_geometry(c, t, where);
    return t;
}

// Version 1 used 32-bit counts and lengths; a big-endian file shows its version byte-swapped.
void check_version(const GgufFile& f, uint32_t version) {
    if (version == 2 || version == 3) return;
    uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= 3)
        f.fail("header", "big-endian GGUF files are not supported (version field reads " + num(version) +
                             " little-endian, " + num(swapped) + " big-endian)");
    if (version == 1)
        f.fail("header", "GGUF version 1 is not supported (only versions 2 and 3); re-convert the model");
    f.fail("header", "GGUF version " + num(version) + " is not supported (only versions 2 and 3)");
}

uint64_t round_up(uint64_t x, uint64_t align) { return (x + align - 1) / align * align; }

// A part number as split file names write it: five digits, zero-padded ("00002").
std::string split_suffix_count(int64_t n) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%05lld", (long long)n);
    return buf;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
    static const char* const kNames[kNumValueTypes] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    uint32_t i = (uint32_t)t;
    return i < kNumValueTypes ? kNames[i] : "unknown";
}

std::string gguf_printable(std::string_view s) {
    constexpr size_t kMaxShown = 200;
    std::string out;
    const uint8_t* p = (const uint8_t*)s.data();
    size_t n = s.size(), k = 0;
    while (k < n && out.size() < kMaxShown) {
        size_t len = utf8_sequence(p + k, n - k);
        if (len == 0 || (len == 1 && (p[k] < 0x20 || p[k] == 0x7F))) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", p[k]);
            out += buf;
            k += 1;
        } else {
            out.append(s.data() + k, len);
            k += len;
        }
    }
    if (k < n) out += "... (" + num(n) + " bytes)";
    return out;
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
    parse();
    // llama.cpp's keys (llama-arch.h LLM_KV_SPLIT_*); split.count 0 or 1 is a whole file.
    int64_t n_split = get_int("split.count", 1);
    int64_t split_no = get_int("split.no", 0);
    if (n_split < 0 || n_split > 99999)
        fail("key 'split.count'", "is " + std::to_string(n_split) + ", expected 1..99999");
    if (n_split > 1 && split_no != 0)
        fail("key 'split.no'", "this is part " + std::to_string(split_no + 1) + " of " +
                                   std::to_string(n_split) + " of a split model; open its first part "
                                   "(NAME-00001-of-" + split_suffix_count(n_split) + ".gguf)");
    if (n_split > 1) open_parts(n_split);
}

GgufFile::GgufFile(const std::string& path, OnePart) : file_(path) { parse(); }

size_t GgufFile::total_size() const {
    size_t n = file_size();
    for (const auto& p : parts_) n += p->file_size();
    return n;
}

// The other parts are named as llama.cpp's llama_split_path names them: the first part's path
// with "-00001-of-0000N.gguf" replaced by "-0000k-of-0000N.gguf".
void GgufFile::open_parts(int64_t n_split) {
    const std::string first_suffix = "-00001-of-" + split_suffix_count(n_split) + ".gguf";
    const std::string& first = path();
    if (first.size() <= first_suffix.size() ||
        first.compare(first.size() - first_suffix.size(), first_suffix.size(), first_suffix) != 0)
        fail("key 'split.count'", "the model is split into " + std::to_string(n_split) +
                                      " files, but this file's name does not end in " + first_suffix +
                                      ", so the other parts cannot be found");
    const std::string prefix = first.substr(0, first.size() - first_suffix.size());
    for (int64_t k = 1; k < n_split; ++k) {
        const std::string part = prefix + "-" + split_suffix_count(k + 1) + "-of-" + split_suffix_count(n_split) + ".gguf";
        const std::string which = "split part " + std::to_string(k + 1) + " of " + std::to_string(n_split) + " (" + part + ")";
        try {
            parts_.push_back(std::unique_ptr<GgufFile>(new GgufFile(part, OnePart{})));
        } catch (const FormatError&) {
            throw;  // names the part's path and what is wrong in it
        } catch (const Error& e) {
            fail(which, std::string("cannot be opened: ") + e.what());
        }
        const GgufFile& p = *parts_.back();
        // A part of another split (or another model) must not be taken for this one's.
        if (p.get_int("split.no", -1) != k || p.get_int("split.count", -1) != n_split)
            p.fail("key 'split.no'", "expected part " + std::to_string(k + 1) + " of " + std::to_string(n_split) +
                                         " of " + first + ", found split.no=" + std::to_string(p.get_int("split.no", -1)) +
                                         " split.count=" + std::to_string(p.get_int("split.count", -1)));
        for (const GgufTensor& t : p.tensors()) {
            if (!tensor_index_.emplace(t.name, tensors_.size()).second)
                p.fail(tensor_field(t.name), "is also in another part of the split model");
            tensors_.push_back(t);
            tensors_.back().part = (uint32_t)k;
        }
    }
    const int64_t expected = get_int("split.tensors.count", (int64_t)tensors_.size());
    if (expected != (int64_t)tensors_.size())
        fail("key 'split.tensors.count'", "says " + std::to_string(expected) + " tensors, but the " +
                                              std::to_string(n_split) + " parts hold " +
                                              std::to_string(tensors_.size()));
}

void GgufFile::parse() {
    Cursor c(*this, file_.data(), file_.size());

    // Header.
    if (file_.size() < 4 || std::memcmp(file_.data(), "GGUF", 4) != 0)
        fail("header", "not a GGUF file (no 'GGUF' magic at the start)");
    c.skip(4, "header", "magic");
    version_ = c.read<uint32_t>("header", "version");
    check_version(*this, version_);
    uint64_t n_tensors = c.read<uint64_t>("header", "n_tensors");
    uint64_t n_kv = c.read<uint64_t>("header", "n_kv");
    if (n_kv > c.left() / kMinKvBytes)
        c.fail("header", "n_kv is " + num(n_kv) + " but only " + num(c.left()) + " bytes follow");
    if (n_tensors > c.left() / kMinTensorInfoBytes)
        c.fail("header", "n_tensors is " + num(n_tensors) + " but only " + num(c.left()) + " bytes follow");

    // Key/value metadata.
    kv_.reserve((size_t)std::min<uint64_t>(n_kv, kReserveCap));
    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string where = "key #" + num(k);
        std::string_view key = c.read_string(where, "key", kMaxKeyBytes);
        if (key.empty()) c.fail(where, "empty key");
        where = key_field(key);
        if (!is_utf8(key)) c.fail(where, "key is not valid UTF-8");
        GgufType type = read_value_type(c, where, "value type");
        GgufValue value = read_value(c, type, where);
        if (!kv_index_.emplace(std::string(key), kv_.size()).second) c.fail(where, "duplicate key");
        kv_.emplace_back(std::string(key), value);
    }

    if (find("general.alignment")) {
        int64_t align = get_int("general.alignment");
        if (align <= 0 || align > (int64_t)UINT32_MAX || (align & (align - 1)) != 0)
            fail("key 'general.alignment'", "alignment " + std::to_string(align) +
                                                " is not a power of two in 1..2^31");
        alignment_ = (uint64_t)align;
    } else {
        alignment_ = kDefaultAlignment;
    }

    // Tensor infos. The header check was against the bytes after the header; the metadata has
    // used some of them since, so check again against what is left.
    if (n_tensors > c.left() / kMinTensorInfoBytes)
        c.fail("header", "n_tensors is " + num(n_tensors) + " but only " + num(c.left()) +
                             " bytes are left after the metadata");
    tensors_.reserve((size_t)std::min<uint64_t>(n_tensors, kReserveCap));
    for (uint64_t k = 0; k < n_tensors; ++k) {
        GgufTensor t = read_tensor_info(c, k);
        if (!tensor_index_.emplace(t.name, tensors_.size()).second)
            c.fail(tensor_field(t.name), "duplicate tensor name");
        tensors_.push_back(std::move(t));
    }

    // Tensor data: each tensor aligned and wholly inside the file.
    data_offset_ = round_up(c.pos(), alignment_);
    uint64_t size = file_.size();
    uint64_t data_bytes = size > data_offset_ ? size - data_offset_ : 0;
    for (GgufTensor& t : tensors_) {
        std::string where = tensor_field(t.name);
        if (t.offset % alignment_ != 0)
            fail(where, "offset " + num(t.offset) + " is not a multiple of the alignment " + num(alignment_));
        if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset)
            fail(where, "offset " + num(t.offset) + " + " + num(t.nbytes) +
                            " bytes runs past the end of the file (data section starts at " +
                            num(data_offset_) + ", size " + num(size) + ")");
        t.data = file_.data() + data_offset_ + t.offset;
    }
}

void GgufFile::fail(const std::string& field, const std::string& what) const {
    throw FormatError(path() + ": " + field + ": " + what);
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const float* GgufFile::f32_copy(const GgufTensor& t) const {
    const size_t n = (size_t)t.n_elements();
    std::unique_ptr<float[]> copy(new float[n]);
    std::memcpy(copy.get(), t.data, n * sizeof(float));
    const std::lock_guard<std::mutex> lock(copies_mutex_);
    f32_copies_.push_back(std::move(copy));
    return f32_copies_.back().get();
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---- typed getters ----------------------------------------------------------------------------

namespace {

const GgufValue& require(const GgufFile& f, const std::string& key) {
    const GgufValue* v = f.find(key);
    if (!v) f.fail(key_field(key), "required key is missing");
    return *v;
}

[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v,
                             const char* expected) {
    f.fail(key_field(key), "has type " + type_desc(v) + ", expected " + expected);
}

int64_t as_int(const GgufFile& f, const std::string& key, const GgufValue& v) {
    if (!is_integer(v.type)) wrong_type(f, key, v, "an integer");
    if (v.type == GgufType::UINT64 && v.u > (uint64_t)std::numeric_limits<int64_t>::max())
        f.fail(key_field(key), "value " + num(v.u) + " does not fit a signed 64-bit integer");
    return v.i;
}

const GgufValue& require_array(const GgufFile& f, const std::string& key, const char* expected) {
    const GgufValue& v = require(f, key);
    if (v.type != GgufType::ARRAY) wrong_type(f, key, v, expected);
    return v;
}

}  // namespace

std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
    return find(key) ? get_string(key) : fallback;
}

std::string GgufFile::get_string(const std::string& key) const {
    const GgufValue& v = require(*this, key);
    if (v.type != GgufType::STRING) wrong_type(*this, key, v, "a string");
    return std::string(v.str);
}

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
    const GgufValue* v = find(key);
    return v ? as_int(*this, key, *v) : fallback;
}

int64_t GgufFile::get_int(const std::string& key) const { return as_int(*this, key, require(*this, key)); }

double GgufFile::get_float(const std::string& key, double fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (is_float(v->type)) return v->f;
    // Some converters write whole-number hyper-parameters (e.g. rope.freq_base) as integers.
    if (is_integer(v->type)) return v->type == GgufType::UINT64 ? (double)v->u : (double)v->i;
    wrong_type(*this, key, *v, "a number");
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (v->type != GgufType::BOOL) wrong_type(*this, key, *v, "a bool");
    return v->i != 0;
}

std::vector<std::string_view> GgufFile::get_string_array(const std::string& key) const {
    const GgufValue& v = require_array(*this, key, "an array of string");
    if (v.elem_type != GgufType::STRING) wrong_type(*this, key, v, "an array of string");
    std::vector<std::string_view> out;
    out.reserve((size_t)v.count);  // validated against the file size at open
    gguf_for_each_element(v, [&](const GgufValue& e) { out.push_back(e.str); });
    return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
    const GgufValue& v = require_array(*this, key, "an array of float32");
    if (v.elem_type != GgufType::FLOAT32) wrong_type(*this, key, v, "an array of float32");
    std::vector<float> out((size_t)v.count);
    if (v.count) std::memcpy(out.data(), v.elems, v.count * sizeof(float));
    return out;
}

std::vector<int32_t> GgufFile::get_int_array(const std::string& key) const {
    const GgufValue& v = require_array(*this, key, "an array of integers");
    if (!is_integer(v.elem_type)) wrong_type(*this, key, v, "an array of integers");
    std::vector<int32_t> out;
    out.reserve((size_t)v.count);
    gguf_for_each_element(v, [&](const GgufValue& e) {
        bool fits = e.type == GgufType::UINT64
                        ? e.u <= (uint64_t)std::numeric_limits<int32_t>::max()
                        : e.i >= std::numeric_limits<int32_t>::min() && e.i <= std::numeric_limits<int32_t>::max();
        if (!fits)
            fail(key_field(key), "element " + num(out.size()) + " does not fit a 32-bit integer");
        out.push_back((int32_t)e.i);
    });
    return out;
}

int64_t GgufFile::array_size(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return -1;
    if (v->type != GgufType::ARRAY) wrong_type(*this, key, *v, "an array");
    return (int64_t)v->count;
}

void gguf_for_each_element(const GgufValue& array, const std::function<void(const GgufValue&)>& fn) {
    if (array.type != GgufType::ARRAY) return;
    const uint8_t* p = array.elems;
    if (array.elem_type == GgufType::STRING) {
        // Lengths were checked against the file when it was opened.
        GgufValue e;
        e.type = GgufType::STRING;
        for (uint64_t k = 0; k < array.count; ++k) {
            uint64_t len = load<uint64_t>(p);
            e.str = std::string_view((const char*)p + 8, (size_t)len);
            p += 8 + len;
            fn(e);
        }
        return;
    }
    size_t size = scalar_size(array.elem_type);
    for (uint64_t k = 0; k < array.count; ++k, p += size) fn(decode_scalar(array.elem_type, p));
}

}  // namespace ei
