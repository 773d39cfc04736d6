#include "quant/types.h"

namespace ei {

namespace {

constexpr TypeInfo kUnknown = {nullptr, 0, 0};

struct TypeTable {
    TypeInfo info[TYPE_COUNT];
    constexpr TypeTable() : info{} {
        for (auto& t : info) t = kUnknown;
        // Sizes are ggml's (see quant/blocks.h for the block layouts we compute with).
        info[TYPE_F32] = {"f32", 1, 4};
        info[TYPE_F16] = {"f16", 1, 2};
        info[TYPE_Q4_0] = {"q4_0", 32, 18};
        info[TYPE_Q4_1] = {"q4_1", 32, 20};
        info[TYPE_Q5_0] = {"q5_0", 32, 22};
        info[TYPE_Q5_1] = {"q5_1", 32, 24};
        info[TYPE_Q8_0] = {"q8_0", 32, 34};
        info[TYPE_Q8_1] = {"q8_1", 32, 36};
        info[TYPE_Q2_K] = {"q2_K", 256, 84};
        info[TYPE_Q3_K] = {"q3_K", 256, 110};
        info[TYPE_Q4_K] = {"q4_K", 256, 144};
        info[TYPE_Q5_K] = {"q5_K", 256, 176};
        info[TYPE_Q6_K] = {"q6_K", 256, 210};
        info[TYPE_Q8_K] = {"q8_K", 256, 292};
        info[TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66};
        info[TYPE_IQ2_XS] = {"iq2_xs", 256, 74};
        info[TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98};
        info[TYPE_IQ1_S] = {"iq1_s", 256, 50};
        info[TYPE_IQ4_NL] = {"iq4_nl", 32, 18};
        info[TYPE_IQ3_S] = {"iq3_s", 256, 110};
        info[TYPE_IQ2_S] = {"iq2_s", 256, 82};
        info[TYPE_IQ4_XS] = {"iq4_xs", 256, 136};
        info[TYPE_I8] = {"i8", 1, 1};
        info[TYPE_I16] = {"i16", 1, 2};
        info[TYPE_I32] = {"i32", 1, 4};
        info[TYPE_I64] = {"i64", 1, 8};
        info[TYPE_F64] = {"f64", 1, 8};
        info[TYPE_IQ1_M] = {"iq1_m", 256, 56};
        info[TYPE_BF16] = {"bf16", 1, 2};
        info[TYPE_TQ1_0] = {"tq1_0", 256, 54};
        info[TYPE_TQ2_0] = {"tq2_0", 256, 66};
        info[TYPE_MXFP4] = {"mxfp4", 32, 17};
    }
};

constexpr TypeTable kTable;

}  // namespace

const TypeInfo& type_info(uint32_t type) { return type < TYPE_COUNT ? kTable.info[type] : kUnknown; }

bool type_known(uint32_t type) { return type_info(type).name != nullptr; }

size_t row_bytes(uint32_t type, int64_t n) {
    const TypeInfo& t = type_info(type);
    return (size_t)(n / t.block_size) * t.type_size;
}

}  // namespace ei
