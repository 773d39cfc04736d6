// The reference kernel table: which scalar kernel serves which type, and each weight type's
// vec_dot_type (the type its activations are quantized to), exactly ggml-cpu's type traits.
#include "cpu/kernels.h"
#include "quant/ref.h"

namespace ei {

void fill_kernels_scalar(KernelTable& t) {
    t = KernelTable{};
    t.isa = Isa::scalar;
    // {to_float, from_float, vec_dot, vec_dot_type}
    t.types[TYPE_F32] = {ref::to_float_f32, ref::from_float_f32, ref::vec_dot_f32, TYPE_F32};
    t.types[TYPE_F16] = {ref::to_float_f16, ref::from_float_f16, ref::vec_dot_f16, TYPE_F16};
    t.types[TYPE_BF16] = {ref::to_float_bf16, ref::from_float_bf16, ref::vec_dot_bf16, TYPE_BF16};
    t.types[TYPE_Q4_0] = {ref::to_float_q4_0, nullptr, ref::vec_dot_q4_0_q8_0, TYPE_Q8_0};
    t.types[TYPE_Q4_1] = {ref::to_float_q4_1, nullptr, ref::vec_dot_q4_1_q8_1, TYPE_Q8_1};
    t.types[TYPE_Q5_0] = {ref::to_float_q5_0, nullptr, ref::vec_dot_q5_0_q8_0, TYPE_Q8_0};
    t.types[TYPE_Q5_1] = {ref::to_float_q5_1, nullptr, ref::vec_dot_q5_1_q8_1, TYPE_Q8_1};
    t.types[TYPE_Q8_0] = {ref::to_float_q8_0, ref::from_float_q8_0, ref::vec_dot_q8_0_q8_0, TYPE_Q8_0};
    // Q8_1 is an activation type only: no dot product takes it as weights.
    t.types[TYPE_Q8_1] = {ref::to_float_q8_1, ref::from_float_q8_1, nullptr, TYPE_Q8_1};
    // The k-quants, with Q8_K activations.
    t.types[TYPE_Q2_K] = {ref::to_float_q2_K, nullptr, ref::vec_dot_q2_K_q8_K, TYPE_Q8_K};
    t.types[TYPE_Q3_K] = {ref::to_float_q3_K, nullptr, ref::vec_dot_q3_K_q8_K, TYPE_Q8_K};
    t.types[TYPE_Q4_K] = {ref::to_float_q4_K, nullptr, ref::vec_dot_q4_K_q8_K, TYPE_Q8_K};
    t.types[TYPE_Q5_K] = {ref::to_float_q5_K, nullptr, ref::vec_dot_q5_K_q8_K, TYPE_Q8_K};
    t.types[TYPE_Q6_K] = {ref::to_float_q6_K, nullptr, ref::vec_dot_q6_K_q8_K, TYPE_Q8_K};
    t.types[TYPE_Q2_K].vec_dot_ggml_tiled = ref::vec_dot_q2_K_q8_K_tiled;
    t.types[TYPE_Q3_K].vec_dot_ggml_tiled = ref::vec_dot_q3_K_q8_K_tiled;
    t.types[TYPE_Q4_K].vec_dot_ggml_tiled = ref::vec_dot_q4_K_q8_K_tiled;
    t.types[TYPE_Q5_K].vec_dot_ggml_tiled = ref::vec_dot_q5_K_q8_K_tiled;
    t.types[TYPE_Q6_K].vec_dot_ggml_tiled = ref::vec_dot_q6_K_q8_K_tiled;
    // The i-quants with a non-linear 4-bit table: IQ4_NL's 32-element blocks take Q8_0
    // activations, IQ4_XS's super-blocks Q8_K.
    t.types[TYPE_IQ4_NL] = {ref::to_float_iq4_nl, nullptr, ref::vec_dot_iq4_nl_q8_0, TYPE_Q8_0};
    t.types[TYPE_IQ4_XS] = {ref::to_float_iq4_xs, nullptr, ref::vec_dot_iq4_xs_q8_K, TYPE_Q8_K};
    t.types[TYPE_IQ4_XS].vec_dot_ggml_tiled = ref::vec_dot_iq4_xs_q8_K_tiled;
    // MXFP4's 32-element blocks take Q8_0 activations, as in ggml-cpu's type traits.
    t.types[TYPE_MXFP4] = {ref::to_float_mxfp4, nullptr, ref::vec_dot_mxfp4_q8_0, TYPE_Q8_0};
    // The 1-bit i-quants and the ternary types: 256-element super-blocks against Q8_K.
    t.types[TYPE_IQ1_S] = {ref::to_float_iq1_s, nullptr, ref::vec_dot_iq1_s_q8_K, TYPE_Q8_K};
    t.types[TYPE_IQ1_M] = {ref::to_float_iq1_m, nullptr, ref::vec_dot_iq1_m_q8_K, TYPE_Q8_K};
    t.types[TYPE_TQ1_0] = {ref::to_float_tq1_0, nullptr, ref::vec_dot_tq1_0_q8_K, TYPE_Q8_K};
    t.types[TYPE_TQ2_0] = {ref::to_float_tq2_0, nullptr, ref::vec_dot_tq2_0_q8_K, TYPE_Q8_K};
    // ggml's tiled GEMM takes the IQ1 types, not the ternary ones.
    t.types[TYPE_IQ1_S].vec_dot_ggml_tiled = ref::vec_dot_iq1_s_q8_K_tiled;
    t.types[TYPE_IQ1_M].vec_dot_ggml_tiled = ref::vec_dot_iq1_m_q8_K_tiled;
    // The 2- and 3-bit lattice i-quants, Q8_K activations for all five.
    t.types[TYPE_IQ2_XXS] = {ref::to_float_iq2_xxs, nullptr, ref::vec_dot_iq2_xxs_q8_K, TYPE_Q8_K};
    t.types[TYPE_IQ2_XS] = {ref::to_float_iq2_xs, nullptr, ref::vec_dot_iq2_xs_q8_K, TYPE_Q8_K};
    t.types[TYPE_IQ2_S] = {ref::to_float_iq2_s, nullptr, ref::vec_dot_iq2_s_q8_K, TYPE_Q8_K};
    t.types[TYPE_IQ3_XXS] = {ref::to_float_iq3_xxs, nullptr, ref::vec_dot_iq3_xxs_q8_K, TYPE_Q8_K};
    t.types[TYPE_IQ3_S] = {ref::to_float_iq3_s, nullptr, ref::vec_dot_iq3_s_q8_K, TYPE_Q8_K};
    t.types[TYPE_IQ2_XXS].vec_dot_ggml_tiled = ref::vec_dot_iq2_xxs_q8_K_tiled;
    t.types[TYPE_IQ2_XS].vec_dot_ggml_tiled = ref::vec_dot_iq2_xs_q8_K_tiled;
    t.types[TYPE_IQ2_S].vec_dot_ggml_tiled = ref::vec_dot_iq2_s_q8_K_tiled;
    t.types[TYPE_IQ3_XXS].vec_dot_ggml_tiled = ref::vec_dot_iq3_xxs_q8_K_tiled;
    t.types[TYPE_IQ3_S].vec_dot_ggml_tiled = ref::vec_dot_iq3_s_q8_K_tiled;
    // Q8_K is an activation type only (never stored in files, no dot product takes it as weights).
    t.types[TYPE_Q8_K] = {ref::to_float_q8_K, ref::from_float_q8_K, nullptr, TYPE_Q8_K};
    fill_ops_scalar(t.ops);          // attention row, SwiGLU, RoPE (cpu/ops_ref.cpp)
}

}  // namespace ei
