// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights repacked at
// load time into 16-row interleaved groups, for the packed GEMV/GEMM (kernels.h,
// TypeKernels::gemm_16row_groups). cpu/repack.cpp has the scalar references of the types' own
// order; the AVX2 and AVX-512 kernels are in cpu/x86/gemm_packed_avx2.cpp and
// gemm_packed_avx512.cpp (Q4_0 and, in FloatOrder::fast, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL in that
// order), gemm_packed_q236k_*.cpp (Q2_K, Q3_K and Q6_K, in FloatOrder::fast only),
// gemm_packed_iq4xs_*.cpp (IQ4_XS, likewise) and gemm_packed_q45k_*.cpp (Q4_K and Q5_K, likewise);
// in llama.cpp's order, AVX2's Q4_1 and Q5_0 and AVX-512's Q4_1 and Q8_0 in their vec_dot's. A
// table repacks the types it has packed kernels for.
//
// Why. With the weights as stored, every output is one row's vec_dot: per block, one row's 32
// products are summed into 8 int32 lanes and FMA'd into 8 float lanes, reduced at the end. The
// integer work per block is the same whatever the layout, but a row at a time leaves most of a
// register's lanes doing that row's bookkeeping (the scale product, the reduction). Interleaving
// 16 rows puts one row in each int32 lane: one multiply-add covers 4 bytes of 8 (AVX2) or 16
// (AVX-512) rows against the same 4 activation bytes (broadcast), and one convert + FMA per block
// serves 8 or 16 outputs. The interleaved group is one contiguous stream, so the decode GEMV reads
// the matrix sequentially, as the hardware prefetcher wants (four row streams side by side were
// measured slower, docs/PERFORMANCE.md).
//
// Layout of one group of 16 rows of K elements (nb = K / 32 blocks a row), 64-byte aligned:
//   uint16_t d[nb][16];          row j's fp16 scale of block i at d[i][j]
//   uint16_t m[nb][16];          Q4_1 and Q5_1 only: row j's fp16 minimum of block i at m[i][j]
//   (padding to a multiple of 64 bytes)
//   uint8_t  qh[nb][4][16];      Q5_0 and Q5_1 only: row j's fifth bits of block i's elements 4t..4t+3 in
//                                the low nibble of qh[i][t][j], of 16+4t..16+4t+3 in the high one
//   uint8_t  qs[nb][P][16][4];   qs[i][t][j][0..3] = row j's block i bytes qs[4t .. 4t + 3]
//                                (P = 4 pieces a block, 8 for Q8_0's 32 bytes)
// Each 4-bit qs byte holds element 4t + b in its low nibble and element 16 + 4t + b in its high
// nibble (the blocks' own packing, unchanged), so qs[i][t] read as 64 bytes is, after `& 15`, the
// 16 rows' elements 4t..4t+3 and, after `>> 4`, their elements 16+4t..16+4t+3; Q8_0's qs[i][t]
// is the 16 rows' elements 4t..4t+3. A group is as many bytes as its 16 rows were (plus padding).
// IQ4_NL's blocks are Q4_0's (d and nibbles), so its groups are too; a nibble is an index into
// its table of 16 values, looked up in registers (VPSHUFB) by the kernels.
//
// Q6_K (256-element super-blocks, nb = K / 256 a row), its own layout:
//   uint16_t d[nb][16];          row j's fp16 super-block scale of super-block i at d[i][j]
//   (padding to a multiple of 64 bytes)
//   int8_t   sc[nb][16][16];     sc[i][s][j] = row j's scale of sub-block s (elements 16s..16s+15)
//   uint8_t  qs[nb][16][3][16][4]  sub-block s of super-block i as three 64-byte lines, row j's
//                                bytes at [j][0..3] of each (b = 0..3, e = 16s + b):
//                                [0]: low 4 bits of element e + 0 | those of e + 8 << 4
//                                [1]: low 4 bits of element e + 4 | those of e + 12 << 4
//                                [2]: the high 2 bits of elements e, e + 4, e + 8, e + 12 at bits
//                                     0-1, 2-3, 4-5, 6-7
// The 6-bit values keep their 4 + 2 bit packing (210 bytes a row's super-block, as stored): a
// GEMV streams every weight byte once per token, so it reads 18% fewer bytes than with the values
// a byte each (which the first kernels used), for two shifts and a few masks and merges per
// 64 values in registers (AVX-512: VPTERNLOGD merges a nibble and its two high bits in one).
// A sub-block's three lines are adjacent: one group is one sequential stream.
//
// Q2_K (256-element super-blocks of 16 sub-blocks of 16, nb = K / 256 a row), its own layout:
//   uint16_t d[nb][16];          row j's fp16 super-block scale of super-block i at d[i][j]
//   uint16_t m[nb][16];          row j's fp16 scale of the minimums (dmin) at m[i][j]
//   (padding to a multiple of 64 bytes)
//   uint8_t  sc[nb][16][16];     sc[i][s][j] = row j's byte of sub-block s as stored: the scale in
//                                the low nibble, the minimum in the high one
//   uint8_t  qs[nb][16][16][4]   sub-block s of super-block i as one 64-byte line, row j's bytes at
//                                [j][0..3]: element 4p + b (b, p = 0..3) at bits 2p..2p+1 of byte b
// (84 bytes a row's super-block, as stored.)
//
// Q3_K (256-element super-blocks of 16 sub-blocks of 16, nb = K / 256 a row), its own layout:
//   uint16_t d[nb][16];          row j's fp16 super-block scale of super-block i at d[i][j]
//   (padding to a multiple of 64 bytes)
//   int8_t   sc[nb][16][16];     sc[i][s][j] = row j's scale of sub-block s less 32 (-32..31)
//   uint8_t  qs[nb][8][3][16][4] sub-blocks 2u and 2u + 1 of super-block i as three 64-byte lines,
//                                row j's bytes at [j][0..3] of each (b = 0..3, p = 0..3):
//                                [0]: the low 2 bits of element 4p + b of sub-block 2u at bits 2p..2p+1
//                                [1]: the same of sub-block 2u + 1
//                                [2]: the high bits: element 4p + b of sub-block 2u at bit p, of
//                                     sub-block 2u + 1 at bit 4 + p
// A value is its low bits with its high bit above them, 0..7 (the stored q3 + 4). (114 bytes a
// row's super-block, 4 more than stored: the 6-bit scales take a byte each.)
//
// IQ4_XS (256-element super-blocks of 8 sub-blocks of 32, nb = K / 256 a row), its own layout:
//   uint16_t d[nb][16];          row j's fp16 super-block scale of super-block i at d[i][j]
//   (padding to a multiple of 64 bytes)
//   int8_t   sc[nb][8][16];      sc[i][s][j] = row j's sub-block scale of sub-block s, ls - 32
//   uint8_t  qs[nb][8][4][16][4] qs[i][s][t][j][0..3] = row j's bytes qs[16s + 4t .. 16s + 4t + 3]
//                                of super-block i: elements 32s + 4t + b (low nibbles) and
//                                32s + 16 + 4t + b (high nibbles), as Q4_0's pieces of a block
// (138 bytes a row's super-block: the 6-bit scales take a byte each, 2 more than stored.)
//
// Q4_K and Q5_K (256-element super-blocks of 8 sub-blocks of 32, nb = K / 256 a row), their own layout:
//   uint16_t d[nb][16];          row j's fp16 super-block scale of super-block i at d[i][j]
//   uint16_t m[nb][16];          row j's fp16 scale of the minimums (dmin) at m[i][j]
//   (padding to a multiple of 64 bytes)
//   uint8_t  sc[nb][256];        super-block i's 6-bit sub-block values, a byte each:
//                                sc[i][16s + j] = row j's scale of sub-block s, and
//                                sc[i][128 + 32u + 2j + h] = row j's minimum of sub-block 2u + h
//                                (a row's minimums in pairs: one int16 pair each, widened)
//   uint8_t  qh[nb][4][8][16];   Q5_K only: row j's fifth bits of piece (c, t) below, those of
//                                elements 64c + 4t + b at bit b, of 64c + 32 + 4t + b at bit 4 + b
//   uint8_t  qs[nb][4][8][16][4] qs[i][c][t][j][0..3] = row j's bytes qs[32c + 4t .. 32c + 4t + 3]
//                                of super-block i: elements 64c + 4t + b (low nibbles, sub-block
//                                2c) and 64c + 32 + 4t + b (high nibbles, sub-block 2c + 1), the
//                                block's own packing
// (148 bytes a row's super-block, Q5_K 180: the 6-bit scales and minimums take a byte each, 4
// more than stored.)
//
// Float order. Q4_0 is not a llama.cpp-exact type, so its kernels keep one FMA chain per output,
// which the scalar reference and every ISA's kernel compute bit for bit:
//   acc = 0; for each block i in order:
//     isum = sum_e q_w[e] * q_a[e] - 8 * sum_e q_a[e]       (q_w the nibble 0..15; exact int32)
//     acc  = fma((float)isum, d_w * d_a, acc)               (d_w * d_a rounded to float first)
//   y = acc
// (against vec_dot they differ by rounding only). In FloatOrder::fast (cpu/kernels.h), Q4_1, Q5_0,
// Q5_1, Q8_0 and IQ4_NL use the same order, Q4_1 and Q5_1 with their minimums in a second chain
// added at the end:
//   acc = acc_m = 0; for each block i in order:
//     isum  = sum_e q_w[e] * q_a[e]                         (Q4_1: the nibble 0..15; Q8_0: signed;
//                                                            Q5_0: 0..31, less 16 * sum_e q_a[e];
//                                                            Q5_1: 0..31;
//                                                            IQ4_NL: the nibble's table value)
//     acc   = fma((float)isum, d_w * d_a, acc)
//     acc_m = fma(m_w, s_a, acc_m)                          (Q4_1, Q5_1; s_a the q8_1 block's s)
//   y = acc + acc_m                                         (Q8_0: y = acc)
// A third of the float work per block of vec_dot's order (one convert and one FMA per 16 outputs
// instead of eight of each), the same bits on every ISA and for every batch size.
// Q6_K in FloatOrder::fast, against block_q8_K activations (d_a a float, bsums_a[s] the sum of
// sub-block s's q_a), one chain per output as well:
//   acc = 0; for each super-block i in order:
//     isum = sum_s sc_w[s] * (sum_{e in s} q_w[e] * q_a[e] - 32 * bsums_a[s])   (q_w 0..63; exact int32:
//                                                        |isum| <= 16 * 128 * 16 * 63 * 128 < 2^31)
//     acc  = fma((float)isum, d_w * d_a, acc)               (d_w * d_a rounded to float first)
//   y = acc
// Q3_K in FloatOrder::fast likewise, its values 0..7 offset by 4:
//   isum = sum_s sc_w[s] * (sum_{e in s} q_w[e] * q_a[e] - 4 * bsums_a[s])   (exact int32: |isum| <=
//                                                        16 * 32 * (16 * 7 * 128 + 4 * 16 * 128) < 2^31)
// IQ4_XS in FloatOrder::fast, against block_q8_K activations, likewise (v(q) the table value of a
// nibble, sc_w[s] = ls - 32):
//   acc = 0; for each super-block i in order:
//     isum = sum_s sc_w[s] * sum_{e in s} v(q_w[e]) * q_a[e]     (exact int32: |isum| <= 8 * 32 *
//                                                                 32 * 127 * 127 < 2^31)
//     acc  = fma((float)isum, d_w * d_a, acc)
//   y = acc
// Q2_K in FloatOrder::fast as Q4_K below, over its 16 sub-blocks of 16 (q_w 0..3, sc_w and mn_w 0..15,
// bsums_a[s] the sum of sub-block s's q_a; exact int32 with room to spare).
// Q4_K and Q5_K in FloatOrder::fast, against block_q8_K activations, two chains per output (bs_a[s] =
// bsums_a[2s] + bsums_a[2s + 1], the sum of sub-block s's q_a):
//   acc = acc_m = 0; for each super-block i in order:
//     isum = sum_s sc_w[s] * sum_{e in s} q_w[e] * q_a[e]     (q_w the nibble 0..15, Q5_K's value
//                                                              0..31; exact int32:
//                                                              |isum| <= 256 * 31 * 128 * 63 < 2^31)
//     imin = sum_s mn_w[s] * bs_a[s]                          (exact)
//     acc   = fma((float)isum, d_w * d_a, acc)
//     acc_m = fma((float)imin, dmin_w * d_a, acc_m)
//   y = acc - acc_m
// which is the order of ggml's GEMV over its own repacked Q4_K (ggml_gemv_q4_K_8x8_q8_K): a
// one-column product gives llama.cpp's bits (vec_dot_ggml_repack's, tested), and the fast order
// keeps them for every batch, where llama.cpp's GEMM sums a prompt in another order. Q5_K has the
// same two chains (llama.cpp does not repack Q5_K; its vec_dot sums in 8 float lanes).
// In llama.cpp's order Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS are not repacked (their vec_dots
// read the rows as stored).
// In FloatOrder::llama_cpp, Q4_1, Q5_0 and Q8_0 are exact-to-llama.cpp
// types (SmolLM2 Q4_1 is a fixture model; Gemma 3's Q4_K_M file stores its 640-wide rows as Q5_0
// and its output matrix as Q8_0), so their packed kernels compute the table's own vec_dot bits
// (ggml's x86 order: 8 lanes per output, lane l the exact integer sum over bytes 4l..4l+3 of each
// block's unpacked values, FMA'd with
// d_w * d_a; Q4_1's m_w * s_a in a separate FMA chain; the lanes reduced as hsum_float_8 does,
// the chain added last): with the 8 lanes of one output spread over 8 registers (one per lane,
// a row per register lane), hsum_float_8's shuffles become 7 vertical adds in the same order.
// They are tested bit for bit against vec_dot; the scalar table, whose vec_dot has another
// order, does not repack them.
//
// Prefetch. The x86 kernels request each group's lines one group ahead of the products (a panel
// of one or two columns two groups ahead as well: cpu/x86/request_ahead.h), and past their last
// group too: what follows in memory is the next task's first group or the next matrix's, because
// the groups are allocated end to end (common/weight_arena.h) in load order, which is the order a
// layer multiplies its matrices. (A request past the end of the memory does not fault.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cpu/tensor.h"
#include "quant/types.h"

namespace ei {

constexpr int64_t kPackRows = 16;  // rows in one interleaved group
constexpr int64_t kQ6SubBlockBytes = 3 * 64;  // a Q6_K group's sub-block: three 64-byte lines
constexpr int64_t kQ3SubBlockPairBytes = 3 * 64;  // a Q3_K group's two sub-blocks: three 64-byte lines
constexpr int64_t kQ2SubBlockBytes = 64;  // a Q2_K group's sub-block: one line

// The packed kernels take a call's activation columns in panels of at most max_cols, calling
// fn(panel, first column, columns) in order. The panels are of even width (9 columns at most 8
// a panel: 5 + 4, not 8 + 1), since a panel of one or two columns is a few chains of dependent
// multiply-adds, bound by their latency rather than their throughput.
template <class Fn>
inline void for_each_panel(int64_t n, int max_cols, Fn&& fn) {
    const int64_t panels = (n + max_cols - 1) / max_cols;
    for (int64_t p = 0; p < panels; ++p) {
        const int64_t c0 = n * p / panels;
        fn(p, c0, (int)(n * (p + 1) / panels - c0));
    }
}

// The 32-element types' packed arrays beside d and qs: minimums (m) and fifth bits (qh).
constexpr bool packed_has_minimums(uint32_t type) { return type == TYPE_Q4_1 || type == TYPE_Q5_1; }
constexpr bool packed_has_fifth_bits(uint32_t type) { return type == TYPE_Q5_0 || type == TYPE_Q5_1; }

// True if a weight of this type and shape is repacked (a type with packed kernels, whole
// groups of 16 rows, whole blocks: 32 elements, 256 for the k-quants and IQ4_XS).
bool packed_layout_supported(uint32_t type, int64_t rows, int64_t cols);
// Where the arrays of one group of 16 rows of `cols` elements are (byte offsets; d is at 0).
struct PackedLayout {
    size_t m = 0;      // Q4_1's and Q5_1's minimums, Q2_K's, Q4_K's and Q5_K's dmin (right after d)
    size_t qh = 0;     // Q5_0's, Q5_1's and Q5_K's fifth bits (64-byte aligned)
    size_t sc = 0;     // the k- and i-quants' sub-block scales (64-byte aligned)
    size_t qs = 0;     // the nibbles, Q8_0's bytes, Q6_K's 6-bit values (64-byte aligned)
    size_t group = 0;  // bytes of the group (a multiple of 64)
};
PackedLayout packed_layout(uint32_t type, int64_t cols);
// packed_layout(type, cols).group.
size_t packed_group_bytes(uint32_t type, int64_t cols);
// Repacks `rows` rows (row r at src + r * src_row_bytes) into rows / 16 groups at dst
// (packed_group_bytes(type, cols) each). packed_layout_supported(type, rows, cols) must hold.
void repack_rows(uint32_t type, const uint8_t* src, size_t src_row_bytes, int64_t rows, int64_t cols, uint8_t* dst);
// A 64-byte aligned buffer holding the repacked rows (rows / 16 groups).
std::shared_ptr<const uint8_t> make_packed(uint32_t type, const uint8_t* src, size_t src_row_bytes, int64_t rows,
                                           int64_t cols);
// Matrix i of a stack of t.ne[2] matrices (a MoE layer's experts) as a 2-D tensor: its rows in
// the mapping and, where the stack was repacked (each matrix whole groups of 16 rows, so the
// stack's groups are its matrices' groups end to end), its groups.
Tensor stacked_matrix(const Tensor& t, int64_t i);
// False if EDGEINFER_REPACK=0 (read once): weights then stay in the mapping, as stored, and
// matmul uses the vec_dot kernels (for A/B measurements).
bool repack_enabled();

}  // namespace ei
