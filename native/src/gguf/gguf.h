// GGUF reader over a memory mapping. No model semantics: header, key/value metadata, tensor infos.
// Every offset, count, length, dimension and type is bounds-checked against the file; anything
// wrong throws ei::FormatError naming the file, the field and the problem. Nothing is copied out
// of the mapping except small scalars: strings and arrays are views into it, and a 262k-entry
// vocabulary array is only walked once (to index its strings) when asked for.
//
// A split model (llama.cpp's gguf-split: NAME-00001-of-0000N.gguf ... NAME-0000N-of-0000N.gguf,
// every part a complete GGUF file with `split.no`, `split.count`, `split.tensors.count`; the
// metadata in the first, each tensor in exactly one part) is opened by the first part's path:
// the other parts are mapped and validated like any file, and their tensors join one table.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mmap.h"

namespace ei {

// GGUF metadata value types (part of the file format).
enum class GgufType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

// A string from a file (a key, a name, a string value) made safe to quote in an error message:
// control characters (NUL would end the message) and bytes that are not UTF-8 (the message
// becomes a Python str, which must decode) become \xNN, and a very long one is cut.
std::string gguf_printable(std::string_view s);

struct GgufValue {
    GgufType type;
    // Scalars (valid when type is a scalar): the value widened.
    int64_t i = 0;        // all integer types and bool
    uint64_t u = 0;       // UINT64 exactly
    double f = 0;         // FLOAT32/FLOAT64
    std::string_view str; // STRING
    // Arrays (type == ARRAY): element type, count, and where the elements start in the mapping.
    GgufType elem_type = GgufType::UINT8;
    uint64_t count = 0;
    const uint8_t* elems = nullptr;  // for STRING arrays: the first (length, bytes) record
};

struct GgufTensor {
    std::string name;
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the row length (fastest-varying)
    uint32_t type = 0;             // GgmlType
    uint64_t offset = 0;           // relative to the data section
    const uint8_t* data = nullptr; // in the mapping of its part
    uint32_t part = 0;             // which part of a split model holds it (0 for a whole file)
    size_t nbytes = 0;
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// Calls fn once per element of an ARRAY value (as validated at open), in order, each element as a
// scalar GgufValue (strings as views into the mapping). For callers that need every element
// whatever its type, e.g. the Python binding's metadata().
void gguf_for_each_element(const GgufValue& array, const std::function<void(const GgufValue&)>& fn);

class GgufFile {
public:
    // Opens and validates; throws ei::Error if the file can't be mapped, ei::FormatError if malformed.
    // The first part of a split model opens every part (a missing or mismatched one is a
    // FormatError naming it); any other part alone is a FormatError naming the first.
    explicit GgufFile(const std::string& path);

    const std::string& path() const { return file_.path(); }
    // A split model's parts, the first one included (one for a whole file), and their bytes.
    size_t n_parts() const { return 1 + parts_.size(); }
    const std::string& part_path(size_t i) const { return i == 0 ? path() : parts_[i - 1]->path(); }
    size_t total_size() const;
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    size_t file_size() const { return file_.size(); }  // of the first part
    // The whole mapped file (the first part of a split model) (header, metadata and tensor table are bytes [0, data_offset())).
    const uint8_t* bytes() const { return file_.data(); }

    // Metadata in file order.
    const std::vector<std::pair<std::string, GgufValue>>& kv() const { return kv_; }
    const GgufValue* find(const std::string& key) const;

    // Typed getters: throw FormatError if present with the wrong type; `fallback` if absent.
    // Integer getters accept any integer type whose value fits.
    std::string get_string(const std::string& key, const std::string& fallback) const;
    std::string get_string(const std::string& key) const;  // required
    int64_t get_int(const std::string& key, int64_t fallback) const;
    int64_t get_int(const std::string& key) const;  // required
    double get_float(const std::string& key, double fallback) const;
    bool get_bool(const std::string& key, bool fallback) const;

    // Array accessors: throw FormatError if absent (unless optional) or of another element type.
    std::vector<std::string_view> get_string_array(const std::string& key) const;
    std::vector<float> get_float_array(const std::string& key) const;        // FLOAT32 elements
    std::vector<int32_t> get_int_array(const std::string& key) const;        // any integer elements that fit
    // Element count of an array key, or -1 if absent.
    int64_t array_size(const std::string& key) const;

    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* find_tensor(const std::string& name) const;
    // The values of an F32 tensor of this file copied once into memory the file owns (kept as
    // long as the file). The small vectors every step reads (norm weights, biases of the F32 kind)
    // then never touch the mapping after loading: there a page fault maps a whole large folio of
    // the page cache (hundreds of KiB of the neighbouring weights) into the resident set.
    const float* f32_copy(const GgufTensor& t) const;

    [[noreturn]] void fail(const std::string& field, const std::string& what) const;

private:
    struct OnePart {};  // a part of a split model, opened by the first: no parts of its own
    GgufFile(const std::string& path, OnePart);
    void parse();
    void open_parts(int64_t n_split);

    MappedFile file_;
    std::vector<std::unique_ptr<GgufFile>> parts_;  // parts 2..N of a split model
    mutable std::mutex copies_mutex_;
    mutable std::vector<std::unique_ptr<float[]>> f32_copies_;  // f32_copy's
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::vector<GgufTensor> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace ei
