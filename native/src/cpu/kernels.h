// The per-type kernel table (ggml's "type traits"): how to turn a row of each weight type into
// floats, how to quantize activations into the type its dot product wants, and the dot product.
// Every entry has a scalar reference (quant/ref_*.cpp); each ISA unit (cpu/x86/avx2.cpp, ...)
// overrides the entries it accelerates. One table is selected at start-up (cpu/dispatch.cpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ei {

enum class Isa : int { scalar = 0, avx2 = 1, avx512 = 2, neon = 3 };
const char* isa_name(Isa isa);

// Dequantize n elements (n a multiple of the block size) from a row of blocks to floats.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
// Quantize n floats into a row of blocks of this type (n a multiple of the block size).
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// *s = dot(x, y) over n elements; x is a row of the weight type, y a row of its vec_dot_type.
using VecDotFn = void (*)(int64_t n, float* s, const void* x, const void* y);
// Many dot products at once (cpu/gemm.cpp, cpu/x86/gemm_avx512.cpp): y[c * ldy + r] = vec_dot(k, w row r, a row c) for
// r < m, c < n, every result bit-identical to the same table's vec_dot (or, for gemm_ggml_repack /
// gemm_ggml_tiled below, to vec_dot_ggml_repack_gemm / vec_dot_ggml_tiled).
using GemmFn = void (*)(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                        size_t a_stride, float* y, int64_t ldy);
// Activation rows a small-batch GEMM (TypeKernels::gemm_small_batch) takes in one pass over the
// weights; a batch of more is done in passes of this many. matmul uses it up to this many rows:
// beyond, the tiled GEMM's unpacked row tiles and 8-column panels pay for themselves.
constexpr int64_t kSmallBatchMax = 8;

struct TypeKernels {
    ToFloatFn to_float = nullptr;
    FromFloatFn from_float = nullptr;  // set for types that activations are quantized into
    VecDotFn vec_dot = nullptr;        // set for types usable as matmul weights
    uint32_t vec_dot_type = TYPE_F32;  // the type activations are converted to for vec_dot
    // The per-row dot product of ggml-cpu's repacked GEMV/GEMM (repack.cpp), for the types that
    // ggml repacks on this ISA (weights with a multiple of 8 rows): same integers as vec_dot,
    // but the floats are accumulated in that kernel's order. matmul prefers it when set.
    VecDotFn vec_dot_ggml_repack = nullptr;
    // The same kernels' GEMM order, which ggml uses for the activation rows in whole groups of
    // 4 (the remaining n % 4 rows go through the GEMV, vec_dot_ggml_repack). Set with it.
    VecDotFn vec_dot_ggml_repack_gemm = nullptr;
    // The per-output order of ggml-cpu's tiled k-quant GEMM (tiled.cpp), which ggml uses for
    // k-quant weights it has not repacked when a matmul has at least kTiledMinBatch activation
    // rows: same integers as vec_dot, summed exactly per super-block, one float rounding chain
    // per super-block. matmul prefers it for such batches when set.
    VecDotFn vec_dot_ggml_tiled = nullptr;
    GemmFn gemm = nullptr;             // set where a tiled kernel beats one vec_dot per output
    // GEMMs in the orders above (cpu/x86/gemm_kquants_avx512.cpp, gemm_kquants_avx2.cpp): every output bit-identical to
    // vec_dot_ggml_repack_gemm / vec_dot_ggml_tiled. matmul uses them for the columns and batches
    // it would give those per-output functions, and falls back to the per-output calls where they
    // are null.
    GemmFn gemm_ggml_repack = nullptr;
    GemmFn gemm_ggml_tiled = nullptr;
    // The GEMV/GEMM over weights repacked at load into 16-row groups (cpu/repack.h: layout and
    // float orders: Q4_0 its own; Q4_1, Q5_0, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS their own in FloatOrder::fast, else the
    // table's vec_dot's where it has them): w points at a group, w_stride =
    // packed_group_bytes, m a multiple of 16. Set for the types the loader repacks when this
    // table is used.
    GemmFn gemm_16row_groups = nullptr;
    // The same for one activation row (a decode step), where another ISA's kernel streams the
    // weights faster on this CPU (cpu/dispatch.cpp): the same layout and, in FloatOrder::fast,
    // the same bits. Null: gemm_16row_groups.
    GemmFn gemm_16row_groups_one_token = nullptr;
    // A GEMM for a decode batch (up to kSmallBatchMax activation rows: several sequences' tokens,
    // or drafted tokens being verified): each weight block read once, straight from the weights,
    // and applied to every activation row. Every output bit-identical to vec_dot's, so a token
    // decoded in a batch gets exactly the logits it gets decoded alone.
    GemmFn gemm_small_batch = nullptr;
    // The same for the order of vec_dot_ggml_repack (the GEMV of the weights ggml repacks), which
    // is a one-row matmul's order for those types: bit-identical to vec_dot_ggml_repack.
    GemmFn gemm_small_batch_ggml_repack = nullptr;
};

// ---- float ops of the residual path (ggml-cpu's vec.h / vec.cpp / ops.cpp kernels) --------
// Activations are quantized to 8 bits before every matmul, so a last-ulp difference in any of
// these flips int8 roundings downstream: each ISA version mirrors what ggml's CPU backend
// computes when built for that ISA (same vector widths, accumulator counts, reduction order,
// polynomials and FMA contractions), and the scalar reference mirrors ggml built without SIMD.

// One query row of flash attention over an F16 cache (ggml_compute_forward_flash_attn_ext_f16_one_chunk,
// F16 K and V): positions first..last of the K/V rows; Q rounded to F16, KQ dot in
// ggml_vec_dot_f16's order, online softmax with expf, V accumulated in F16; out = VKQ / S.
struct AttnF16Query {
    const float* q;         // [head_dim]
    float* out;             // [head_dim]
    int64_t first, last;    // the positions it attends to
    float sink = -INFINITY; // the head's attention-sink logit (cpu/attn_sink.h); -inf: none
};
// Queries that share their K/V rows (k + ic * kv_stride, likewise v; head_dim elements each): the
// heads of a GQA group, the rows of a batch in one sequence. Each is computed exactly as it is
// alone; one pass over the positions serves them all, so each K/V row is read from L1 by every
// query after the first, and the queries are independent work the core can overlap.
// At most kAttnMaxQueries a call; scratch holds 2 * head_dim * n_queries halves.
constexpr int64_t kAttnMaxQueries = 32;
using AttnF16RowsFn = void (*)(const AttnF16Query* queries, int64_t n_queries, const uint16_t* k,
                               const uint16_t* v, int64_t kv_stride, int64_t head_dim, float scale,
                               uint16_t* scratch);
// out[i] = silu(gate[i]) * up[i] (ggml_vec_swiglu_f32); out may equal gate.
using SwigluFn = void (*)(int64_t n, const float* gate, const float* up, float* out);
// RoPE "normal" rotation of adjacent pairs (ggml's rotate_pairs): for each of n_heads rows of
// head_dim values, pairs i0 < n_rot are rotated by cs[i0] = cos, cs[i0+1] = sin; values past
// n_rot are copied. dst may equal src (each pair is read before it is written).
using RopeRotateFn = void (*)(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                              const float* cs);
// RoPE "neox" rotation (rotate_pairs with n_offset = n_rot/2): the pair of element i and element
// i + n_rot/2, for i < n_rot/2, is rotated by cs[2i] = cos, cs[2i+1] = sin (the same angle table
// as the normal mode); same shapes and aliasing rule as RopeRotateFn.
// out[i] = gelu_tanh(gate[i]) * up[i] (ggml_vec_geglu_f32 with GGML_GELU_FP16: gate rounded to
// F16 and looked up in a 65536-entry GELU table, 0 below -10, gate itself above 10); out may
// equal gate.
using GegluFn = void (*)(int64_t n, const float* gate, const float* up, float* out);
// ggml_vec_soft_max_f32: y[i] = exp(x[i] - max) over n values; returns their sum in double, each
// vector's lanes reduced as ggml's build of the ISA reduces them (whole vectors through ggml's
// vectorized expf, the tail through libm's expf, as ggml does).
using SoftMaxFn = double (*)(int64_t n, const float* x, float max, float* y);

// The K/V types of a quantized cache, as one-row flash attention uses them: Q is converted to
// K's vec_dot_type (q_to_k), scores come from K's vec_dot, V rows are dequantized (v_to_float).
struct AttnKvTypes {
    FromFloatFn q_to_k;
    VecDotFn kq_dot;
    ToFloatFn v_to_float;
    uint32_t type_v;  // a Q8_0 V is dequantized and accumulated in one pass (same values)
};
// One query row of flash attention over a cache whose K or V is quantized
// (ggml_compute_forward_flash_attn_ext_f16_one_chunk with a non-F16 V): positions first..last,
// K rows at k + ic * k_stride bytes (likewise V); Q converted with t.q_to_k, KQ by t.kq_dot,
// online softmax with expf, V rows dequantized and accumulated in F32 (ggml_vec_mad_f32 /
// ggml_vec_scale_f32); out = VKQ / S. scratch holds 3 * head_dim floats. With ms set, the
// result is partial instead (for merging with the sink rows of a centered K, kv/sink_attention.h):
// out = VKQ unnormalized, ms[0] = the maximum score M, ms[1] = S.
using AttnKvqRowFn = void (*)(const float* q, const uint8_t* k, const uint8_t* v, size_t k_stride, size_t v_stride,
                              int64_t first, int64_t last, int64_t head_dim, float scale, const AttnKvTypes& t,
                              float* scratch, float* out, float* ms);

// Split-KV attention over a cache whose K is Q8_0 or Q4_0 (V Q8_0, Q4_0 or F16), for `group`
// query heads that share one KV head, over one span of positions: K and V blocks are read once
// for the whole group, Q is quantized to 8 bits so scores are integer dot products, the softmax
// is two-pass over the span. The result is partial, for merging spans (cpu/attn_kvq_span.h):
//   m[g] = max_i s[g][i],  l[g] = sum_i exp(s[g][i] - m[g]),  acc[g] = sum_i exp(s[g][i] - m[g]) v_i
// with s[g][i] = scale * (q_g . k_i). Not ggml's algorithm: its results differ from the row
// kernel's by rounding (Q scale kept in float, one exp polynomial), and match across ISAs bit for bit.
struct AttnKvqSpan {
    const float* q;            // [group][head_dim]
    int64_t group;
    const uint8_t* k;          // this KV head's K in the row of position 0; row ic at k + ic * k_stride
    const uint8_t* v;          // likewise V
    size_t k_stride, v_stride;
    int64_t first, last;       // positions first..last
    int64_t head_dim;          // a multiple of 32
    float scale;
    uint32_t type_k, type_v;
    float* scratch;            // attn_kvq_span_scratch_floats(group, head_dim, last - first + 1) floats
};
using AttnKvqSpanFn = void (*)(const AttnKvqSpan& a, float* acc, float* m, float* l);
inline bool attn_kvq_span_supports(uint32_t type_k, uint32_t type_v) {
    return (type_k == TYPE_Q8_0 || type_k == TYPE_Q4_0) &&
           (type_v == TYPE_Q8_0 || type_v == TYPE_Q4_0 || type_v == TYPE_F16);
}
inline size_t attn_kvq_span_scratch_floats(int64_t group, int64_t head_dim, int64_t n_pos) {
    const int64_t n_pos16 = (n_pos + 15) & ~int64_t(15), nb8 = (head_dim / 32 + 7) & ~int64_t(7);
    return (size_t)(group * (n_pos16 + head_dim / 4 + 2 * nb8) + 16);
}

// Attention of a prompt chunk over an F16 cache, tiled (not ggml's one-row kernel; llama.cpp too
// leaves that kernel for prompts of 64+ rows): the query rows of `n_tok` consecutive tokens x the
// `group` heads that share one KV head, over blocks of keys converted to F32 once for all those
// rows; scores and softmax in F32 with a vectorized exp (online over key blocks), V accumulated
// in F32. Token t (0-based in the tile) sees positions first_t..last0 + t, first_t = 0 or, with a
// window, max(0, last0 + t - window + 1). Results differ from the one-row kernel by rounding.
struct AttnF16Tile {
    const float* q;          // row (t, g) at q + t * q_token_stride + g * head_dim
    float* out;              // same layout as q
    int64_t n_tok, group, q_token_stride;
    const uint16_t* k;       // this KV head's K at position 0; position p at k + p * kv_stride
    const uint16_t* v;       // likewise V
    int64_t kv_stride;
    int64_t last0, window;   // last position seen by token 0; window 0 = none
    int64_t head_dim;        // a multiple of 8
    float scale;
    float* scratch;          // attn_f16_tile_scratch_floats(n_tok * group, head_dim) floats (tile only)
    // Span mode (attn_f16_span; part set, attn_f16_tile leaves it null): only the keys of the
    // block starting at k_first (a multiple of kAttnTileKeys), and the rows' partial results
    // instead of `out`: row r = t * group + g at part + r * (head_dim + 2):
    // sum_j exp(s_j - m) v_j (unnormalized), then m, then l = sum_j exp(s_j - m) (m = -inf, l = 0
    // for a row that sees none of these keys). A row's partial depends on its own query and
    // range only, not on the other rows of the call.
    float* part = nullptr;
    int64_t k_first = 0;
    // The group's attention-sink logits ([group], cpu/attn_sink.h), or nullptr: added to each
    // row's sum before it is normalized (not in span mode: the merge of the spans adds them).
    const float* sinks = nullptr;
};
using AttnF16TileFn = void (*)(const AttnF16Tile& a);
constexpr int64_t kAttnTileKeys = 64;     // keys per block of the tiled kernel
constexpr int64_t kAttnTileMinRows = 64;  // batches from this many tokens use it (llama.cpp's threshold)
inline size_t attn_f16_tile_scratch_floats(int64_t rows, int64_t head_dim) {
    return (size_t)(2 * kAttnTileKeys * head_dim + rows * (head_dim + 2) + kAttnTileKeys);
}

struct OpKernels {
    AttnF16RowsFn attn_f16_rows = nullptr;
    AttnF16TileFn attn_f16_tile = nullptr;  // prompt chunks of kAttnTileMinRows+ rows, where set
    AttnF16TileFn attn_f16_span = nullptr;  // span mode: fast-order decode steps and short batches
    AttnKvqRowFn attn_kvq_row = nullptr;
    AttnKvqSpanFn attn_kvq_span = nullptr;  // preferred over attn_kvq_row where set and supported
    SwigluFn swiglu = nullptr;
    RopeRotateFn rope_rotate = nullptr;
    RopeRotateFn rope_rotate_neox = nullptr;
    GegluFn geglu = nullptr;
    SoftMaxFn soft_max = nullptr;
};

// How the matmuls of the types that have a float order of their own sum (cpu/repack.h, "Float
// order"): llama_cpp keeps every kernel in the order llama.cpp's CPU backend uses on this ISA, so
// logits are its bits; fast uses the packed one-chain-per-output kernels for Q4_1, Q5_0 and Q8_0
// too (as Q4_0 always does), and Q6_K's (one per 256-value super-block) where the table has them
// (scalar, AVX2, AVX-512), which need a fraction of the float work per block and give the same
// bits on every ISA that has them, for every batch size, and decode attention over an F16 cache
// in F32 over fixed spans (layers/cpu_blocks.cpp). EDGEINFER_EXACT=1 selects llama_cpp.
enum class FloatOrder : int { llama_cpp = 0, fast = 1 };
const char* float_order_name(FloatOrder order);

struct KernelTable {
    Isa isa = Isa::scalar;
    FloatOrder order = FloatOrder::llama_cpp;
    TypeKernels types[TYPE_COUNT];
    OpKernels ops;
};

// The reference table: plain C++, exact ggml semantics. Always available.
void fill_kernels_scalar(KernelTable& t);
// The scalar float ops (cpu/ops_ref.cpp); called by fill_kernels_scalar.
void fill_ops_scalar(OpKernels& ops);
// Each ISA unit overrides what it accelerates (only linked in when built for that architecture).
void fill_kernels_avx2(KernelTable& t);
void fill_kernels_avx512(KernelTable& t);
void fill_kernels_neon(KernelTable& t);
// The tiled prompt attention (cpu/x86/attn_prefill_avx2.cpp for the AVX2 table,
// attn_prefill_avx512.cpp for the AVX-512 one: the same bits).
void fill_attn_prefill_avx2(OpKernels& ops);
void fill_attn_prefill_avx512(OpKernels& ops);
// The fast order's attention over one span of an F16 cache (cpu/x86/attn_span_f16_avx2.cpp): the
// AVX2 and AVX-512 tables both take it.
void fill_attn_span_f16_avx2(OpKernels& ops);
// The float ops of the x86 ISA units (cpu/x86/ops_avx2.cpp, ops_avx512.cpp).
void fill_ops_avx2(OpKernels& ops);
void fill_ops_avx512(OpKernels& ops);
// Attention over a quantized KV cache: scalar (cpu/attn_kvq_ref.cpp: the row kernel and the span
// kernel's reference), x86 FMA (cpu/x86/attn_kvq_fma.cpp: the row kernel, used by the AVX2 and
// AVX-512 tables), and the span kernel (cpu/x86/attn_kvq_avx2.cpp, also the AVX-512 table's: its
// rows-in-lanes scores and register sums beat the one-row AVX-512 kernel it replaced,
// docs/PERFORMANCE.md), bit-identical to the scalar reference.
void fill_attn_kvq_scalar(OpKernels& ops);
void fill_attn_kvq_fma(OpKernels& ops);
void fill_attn_kvq_avx2(OpKernels& ops);
// The tiled matmul kernels (cpu/gemm.cpp: scalar references; cpu/x86/gemm_avx512.cpp, gemm_avx2.cpp).
void fill_gemm_scalar(KernelTable& t);
void fill_gemm_avx512(KernelTable& t);
void fill_gemm_avx2(KernelTable& t);  // cpu/x86/gemm_avx2.cpp
// The k-quant GEMMs in the repacked / tiled orders (cpu/x86/gemm_kquants_avx512.cpp, gemm_kquants_avx2.cpp).
void fill_gemm_kquants_avx512(KernelTable& t);
void fill_gemm_kquants_avx2(KernelTable& t);
// The packed-weight GEMV/GEMMs (cpu/repack.cpp: the scalar Q4_0 reference; cpu/x86/
// gemm_packed_avx2.cpp: Q4_0, Q4_1, Q5_0; cpu/x86/gemm_packed_avx512.cpp: Q4_0, the AVX-512
// table keeping its own kernels for the other two).
void fill_gemm_packed_scalar(KernelTable& t);
void fill_gemm_packed_avx2(KernelTable& t);
void fill_gemm_packed_avx512(KernelTable& t);
// The fast order's packed kernels of Q4_1, Q5_0, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K and IQ4_XS
// (FloatOrder::fast): the scalar references (cpu/repack.cpp) and the ISA kernels bit-identical to
// them.
void fill_gemm_packed_fast_scalar(KernelTable& t);
void fill_gemm_packed_fast_avx2(KernelTable& t);
void fill_gemm_packed_fast_avx512(KernelTable& t);
// NEON's packed kernels (cpu/arm/packed_neon.h): Q4_0 from fill_kernels_neon, the fast order's
// Q4_1, Q8_0 and IQ4_NL from this.
void fill_gemm_packed_fast_neon(KernelTable& t);

// The best ISA this CPU runs, lowered by EDGEINFER_ISA if set (read once).
Isa selected_isa();
// True if this build has the ISA's kernels and this CPU can run them.
bool isa_available(Isa isa);
// FloatOrder::llama_cpp if EDGEINFER_EXACT=1 (read once), else fast.
FloatOrder default_float_order();
// Table for `isa` in `order` (built once, cached). Throws ei::Error if !isa_available(isa).
const KernelTable& kernels_for(Isa isa, FloatOrder order = FloatOrder::llama_cpp);
// Table for selected_isa() in default_float_order().
const KernelTable& kernels();

}  // namespace ei
