// Q4_0 weights repacked at load time into 16-row interleaved groups, for the packed GEMV/GEMM
// (kernels.h, TypeKernels::gemm_packed; cpu/repack.cpp has the scalar reference, cpu/x86/
// gemm_packed_avx512.cpp the AVX-512 VNNI kernels).
//
// Why. With the weights as stored, every output is one row's vec_dot, and that order keeps 8
// float lanes per output and reduces them at the end (llama.cpp's order, which only the
// llama.cpp-exact types need: Q4_0 is not one of them). Interleaving 16 rows puts one row in each
// int32 lane of a 512-bit register: one VPDPBUSD multiplies 4 bytes of each of the 16 rows with
// the same 4 activation bytes (broadcast), so after 8 of them a lane holds its row's whole block
// sum, and one convert + multiply + FMA per block serves 16 outputs. The interleaved group is one
// contiguous stream, so the decode GEMV reads the matrix sequentially, as the hardware prefetcher
// wants (four row streams side by side were measured slower, docs/PERFORMANCE.md).
//
// Layout of one group of 16 rows of K elements (nb = K / 32 blocks a row), 64-byte aligned:
//   uint16_t d[nb][16];          row j's fp16 scale of block i at d[i][j]
//   (padding to a multiple of 64 bytes)
//   uint8_t  qs[nb][4][16][4];   qs[i][t][j][0..3] = row j's block i bytes qs[4t .. 4t + 3]
// Each qs byte holds element 4t + b in its low nibble and element 16 + 4t + b in its high nibble
// (block_q4_0's own packing, unchanged), so qs[i][t] read as 64 bytes is, after `& 15`, the 16
// rows' elements 4t..4t+3 and, after `>> 4`, their elements 16+4t..16+4t+3.
//
// What the kernels compute, per output (row r, activation column c, block_q8_0 activations):
//   acc = 0; for each block i in order:
//     isum = sum_e q_w[e] * q_a[e] - 8 * sum_e q_a[e]       (q_w the nibble 0..15; exact int32)
//     acc  = fma((float)isum, d_w * d_a, acc)               (d_w * d_a rounded to float first)
//   y = acc
// Every ISA's kernel gives exactly these floats (one FMA chain over the blocks), so they are
// tested bit for bit against the scalar reference; against vec_dot they differ by rounding only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ei {

constexpr int64_t kPackRows = 16;  // rows in one interleaved group

// True if a weight of this type and shape is repacked (a type with packed kernels, whole
// groups of 16 rows, whole blocks).
bool packed_layout_supported(uint32_t type, int64_t rows, int64_t cols);
// Bytes of one group of 16 rows of `cols` elements (a multiple of 64).
size_t packed_group_bytes(uint32_t type, int64_t cols);
// Byte offset of the qs array inside a group (after d, padded to 64 bytes).
size_t packed_qs_offset(int64_t cols);
// Repacks `rows` rows (row r at src + r * src_row_bytes) into rows / 16 groups at dst
// (packed_group_bytes(type, cols) each). packed_layout_supported(type, rows, cols) must hold.
void repack_rows(uint32_t type, const uint8_t* src, size_t src_row_bytes, int64_t rows, int64_t cols, uint8_t* dst);
// A 64-byte aligned buffer holding the repacked rows (rows / 16 groups).
std::shared_ptr<const uint8_t> make_packed(uint32_t type, const uint8_t* src, size_t src_row_bytes, int64_t rows,
                                           int64_t cols);
// False if EDGEINFER_REPACK=0 (read once): weights then stay in the mapping, as stored, and
// matmul uses the vec_dot kernels (for A/B measurements).
bool repack_enabled();

}  // namespace ei
