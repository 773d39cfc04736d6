// The tensor element types a GGUF file can name (ggml's `ggml_type` ids, which are part of the
// file format), with their block geometry. This table is the one definition of those ids and
// sizes in the project; Python reads it through the bindings.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ei {

enum GgmlType : uint32_t {
    TYPE_F32 = 0,
    TYPE_F16 = 1,
    TYPE_Q4_0 = 2,
    TYPE_Q4_1 = 3,
    TYPE_Q5_0 = 6,
    TYPE_Q5_1 = 7,
    TYPE_Q8_0 = 8,
    TYPE_Q8_1 = 9,
    TYPE_Q2_K = 10,
    TYPE_Q3_K = 11,
    TYPE_Q4_K = 12,
    TYPE_Q5_K = 13,
    TYPE_Q6_K = 14,
    TYPE_Q8_K = 15,
    TYPE_IQ2_XXS = 16,
    TYPE_IQ2_XS = 17,
    TYPE_IQ3_XXS = 18,
    TYPE_IQ1_S = 19,
    TYPE_IQ4_NL = 20,
    TYPE_IQ3_S = 21,
    TYPE_IQ2_S = 22,
    TYPE_IQ4_XS = 23,
    TYPE_I8 = 24,
    TYPE_I16 = 25,
    TYPE_I32 = 26,
    TYPE_I64 = 27,
    TYPE_F64 = 28,
    TYPE_IQ1_M = 29,
    TYPE_BF16 = 30,
    TYPE_TQ1_0 = 34,
    TYPE_TQ2_0 = 35,
    TYPE_MXFP4 = 39,
    TYPE_COUNT = 40,
};

struct TypeInfo {
    const char* name;     // ggml's name, e.g. "q4_1"; nullptr for ids no type uses
    int64_t block_size;   // elements per block (1 for plain types)
    size_t type_size;     // bytes per block
};

// Geometry of `type`; name == nullptr if the id is unknown.
const TypeInfo& type_info(uint32_t type);

// True if the id names a known type (its size can be computed).
bool type_known(uint32_t type);

// Bytes of a row of n elements; n must be a multiple of the block size (callers check).
size_t row_bytes(uint32_t type, int64_t n);

}  // namespace ei
