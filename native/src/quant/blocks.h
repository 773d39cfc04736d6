// Every quantized block layout the core computes with: the one definition of ggml's block
// structs (ggml-common.h), byte for byte, since GGUF tensors are arrays of them. Each struct
// states its bits per weight and its dequantization formula; each size is checked against the
// type table (quant/types.cpp), so a layout and its size cannot drift apart.
//
// Notation: x[j] is element j of the block (0 <= j < block size); fp16 fields are IEEE halves
// stored as uint16_t (convert with common/fp16.h). Nibble-packed types hold element j in the low
// nibble of qs[j] and element j + 16 in the high nibble (for 32-element blocks).
//
// Included by translation units compiled with different ISA flags: plain structs and constants
// only (no functions), so there is nothing for the linker to merge.
#pragma once
#include <cstdint>

namespace ei {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK_K = 256;         // super-block size of the k-quants
constexpr int K_SCALE_SIZE = 12;  // packed 6-bit scales/mins of q4_K and q5_K

// ---- legacy 32-element blocks -------------------------------------------------------------

// 4.5 bpw. x[j] = d * (q[j] - 8), q[j] in [0, 15].
struct block_q4_0 {
    uint16_t d;              // fp16 scale
    uint8_t qs[QK4_0 / 2];   // nibbles: q[j] = qs[j] & 15, q[j + 16] = qs[j] >> 4
};

// 5.0 bpw. x[j] = d * q[j] + m, q[j] in [0, 15].
struct block_q4_1 {
    uint16_t d;              // fp16 scale
    uint16_t m;              // fp16 minimum
    uint8_t qs[QK4_1 / 2];   // nibbles as in q4_0
};

// 5.5 bpw. x[j] = d * (q[j] - 16), q[j] = low nibble | (bit j of qh) << 4, in [0, 31].
struct block_q5_0 {
    uint16_t d;              // fp16 scale
    uint8_t qh[4];           // 5th bits, little-endian uint32: bit j belongs to element j
    uint8_t qs[QK5_0 / 2];   // low nibbles as in q4_0
};

// 6.0 bpw. x[j] = d * q[j] + m, q[j] as in q5_0.
struct block_q5_1 {
    uint16_t d;              // fp16 scale
    uint16_t m;              // fp16 minimum
    uint8_t qh[4];           // 5th bits as in q5_0
    uint8_t qs[QK5_1 / 2];   // low nibbles as in q4_0
};

// 8.5 bpw. x[j] = d * qs[j]. Also the activation type of q4_0/q5_0/q8_0 dot products.
struct block_q8_0 {
    uint16_t d;              // fp16 scale
    int8_t qs[QK8_0];
};

// 9.0 bpw, activations only (dot products with q4_1/q5_1). x[j] = d * qs[j];
// s = fp16(d * sum(qs)) precomputes the block sum that the weight minimum m multiplies.
struct block_q8_1 {
    uint16_t d;              // fp16 scale
    uint16_t s;              // fp16 of d * sum(qs), d taken before its rounding to fp16
    int8_t qs[QK8_1];
};

// ---- k-quants: 256-element super-blocks of 16 or 8 sub-blocks -----------------------------
// Kernels: quant/ref_kquants.cpp (scalar), cpu/x86/kquants_256.h (AVX2 / AVX-512).

// 2.625 bpw. 16 sub-blocks of 16: x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4),
// q a 2-bit value from qs.
struct block_q2_K {
    uint8_t scales[QK_K / 16];  // 4-bit scale (low) and 4-bit min (high) per sub-block
    uint8_t qs[QK_K / 4];       // 2-bit quants
    uint16_t d;                 // fp16 super-block scale for the scales
    uint16_t dmin;              // fp16 super-block scale for the mins
};

// 3.4375 bpw. 16 sub-blocks of 16: x = d * (scale6[i] - 32) * (q - (hbit ? 0 : 4)),
// q the 2 low bits from qs, hbit from hmask, scale6 a 6-bit value packed in scales.
struct block_q3_K {
    uint8_t hmask[QK_K / 8];    // high bit of each quant
    uint8_t qs[QK_K / 4];       // low 2 bits
    uint8_t scales[12];         // 16 6-bit scales
    uint16_t d;                 // fp16 super-block scale
};

// 4.5 bpw. 8 sub-blocks of 32: x = d * sc[i] * q - dmin * mn[i], q a nibble,
// sc/mn 6-bit values packed in scales.
struct block_q4_K {
    uint16_t d;                     // fp16 super-block scale for the scales
    uint16_t dmin;                  // fp16 super-block scale for the mins
    uint8_t scales[K_SCALE_SIZE];   // 8 scales and 8 mins, 6 bits each
    uint8_t qs[QK_K / 2];           // 4-bit quants
};

// 5.5 bpw. As q4_K with a fifth bit per quant from qh.
struct block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];           // 5th bits
    uint8_t qs[QK_K / 2];           // low 4 bits
};

// 6.5625 bpw. 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q 6 bits (4 from ql, 2 from qh).
struct block_q6_K {
    uint8_t ql[QK_K / 2];           // low 4 bits
    uint8_t qh[QK_K / 4];           // high 2 bits
    int8_t scales[QK_K / 16];       // 8-bit sub-block scales
    uint16_t d;                     // fp16 super-block scale
};

// 9.125 bpw, activations of the k-quant dot products (never stored in files). x[j] = d * qs[j];
// bsums[i] = sum of qs over the 16-element group i.
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

// ---- i-quants with 4-bit indices into a non-linear table ------------------------------------
// Kernels: quant/ref_iquants.cpp (scalar), cpu/x86/iquants_256.h (AVX2 / AVX-512).

constexpr int QK4_NL = 32;
// The 16 values a 4-bit index decodes to (ggml's kvalues_iq4nl): denser near zero, where most
// weights are, than q4_0's evenly spaced -8..7.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// 4.5 bpw. x[j] = d * kIq4nlValues[q[j]], q[j] a nibble packed as in q4_0. llama.cpp's quantizer
// falls back to it for rows that are not whole 256-element super-blocks.
struct block_iq4_nl {
    uint16_t d;               // fp16 scale
    uint8_t qs[QK4_NL / 2];   // nibbles as in q4_0
};

// 4.25 bpw. 8 sub-blocks of 32: x = d * (ls[i] - 32) * kIq4nlValues[q], ls[i] a 6-bit value: its
// low 4 bits in nibble i % 2 of scales_l[i / 2], its high 2 bits at bits 2i..2i+1 of scales_h;
// sub-block i's nibbles are qs[16i .. 16i + 15], packed as in q4_0.
struct block_iq4_xs {
    uint16_t d;                     // fp16 super-block scale
    uint16_t scales_h;              // high 2 bits of the 8 sub-block scales
    uint8_t scales_l[QK_K / 64];    // low 4 bits of the 8 sub-block scales
    uint8_t qs[QK_K / 2];           // 4-bit indices
};

// ---- MXFP4: the OCP microscaling format's 4-bit floats -------------------------------------
// Kernels: quant/ref_mxfp4.cpp (scalar), cpu/x86/mxfp4_256.h (AVX2 / AVX-512),
// cpu/arm/mxfp4_neon.h (NEON).

constexpr int QK_MXFP4 = 32;
// The 16 E2M1 values a 4-bit code decodes to, doubled so that they are integers (ggml's
// kvalues_mxfp4): bit 3 is the sign, so codes 0 and 8 are both zero. The block scale is halved
// to make up for the doubling (common/e8m0.h).
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 4.25 bpw. x[j] = 2^(e - 128) * kMxfp4Values[q[j]], q[j] a nibble packed as in q4_0; e is an
// E8M0 byte (a bare power-of-two exponent, bias 127; 2^(e - 127) halved, see above).
struct block_mxfp4 {
    uint8_t e;                 // E8M0 shared exponent
    uint8_t qs[QK_MXFP4 / 2];  // nibbles as in q4_0
};

// ---- 1-bit i-quants and ternary types: 256-element super-blocks, Q8_K activations --------------
// Kernels: quant/ref_iq1_tq.cpp (scalar), cpu/x86/iq1_tq_256.h (AVX2 / AVX-512),
// cpu/arm/iq1_tq_neon.h (NEON). The IQ1 lattice (2048 groups of 8 values in {-1, 0, 1}) and the
// delta 1/8 are in quant/iq1_grids.h: too big for this header, which the OpenCL prelude mirrors.

// 1.5625 bpw. 8 sub-blocks of 32, each 4 groups of 8: x = d * (2 * s + 1) * (g[j] +- 1/8), g the
// group's grid entry kIq1sGrid[qs[4i + l] | (bits 3l..3l+2 of qh[i]) << 8], s = bits 12..14 of
// qh[i], the delta's sign bit 15 of qh[i] (set: -1/8).
struct block_iq1_s {
    uint16_t d;                 // fp16 super-block scale
    uint8_t qs[QK_K / 8];       // low 8 bits of the 32 grid indices
    uint16_t qh[QK_K / 32];     // per sub-block: 4 x 3 index bits, 3-bit scale, delta sign
};

// 1.75 bpw. 16 half sub-blocks of 16, each 2 groups of 8: x = d * (2 * s + 1) * (g[j] +- 1/8), g
// kIq1sGrid[qs[k] | (bits 0..2 or 4..6 of qh[k / 2]) << 8] for group k, its delta's sign bit 3 or
// 7 of the same byte; s the 3-bit scale of half sub-block h at bits 3 (h % 4) of the uint16_t word
// h / 4 of scales; the fp16 d is the top nibbles of those four words, word 0's lowest.
struct block_iq1_m {
    uint8_t qs[QK_K / 8];       // low 8 bits of the 32 grid indices
    uint8_t qh[QK_K / 16];      // per group pair: 3 index bits + delta sign, twice
    uint8_t scales[QK_K / 32];  // 4 uint16_t words: 4 x 3-bit scales + a nibble of d each
};

// 1.6875 bpw. x = d * (t - 1), t in {0, 1, 2}: base-3 digits packed 5 to a byte (4 in qh), stored
// as ceil(v * 256 / 243) so that digit k of a byte b is ((uint8_t)(b * 3^k) * 3) >> 8. Element order:
// digit k of qs[m] (m < 32) is element 32k + m, of qs[32 + m] (m < 16) element 160 + 16k + m, of
// qh[m] element 240 + 4k + m.
struct block_tq1_0 {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];  // 48 bytes of 5 digits
    uint8_t qh[QK_K / 64];                   // 4 bytes of 4 digits
    uint16_t d;                              // fp16 scale
};

// 2.0625 bpw. x = d * (t - 1), t = bits 2l..2l+1 of qs[32c + m] for element 128c + 32l + m
// (t = 3 decodes to 2 * d; the quantizer never writes it).
struct block_tq2_0 {
    uint8_t qs[QK_K / 4];       // 2-bit digits
    uint16_t d;                 // fp16 scale
};

// ---- i-quants with 2- and 3-bit codes on an E8 lattice ---------------------------------------
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S. Super-blocks of 256 in sub-blocks of 32; each group of
// 8 (IQ2) or 4 (IQ3) magnitudes is one index into a grid of lattice points (quant/iq_grids.h, the
// grids' one definition: they stay out of this file, which holds one-line tables only), each
// element's sign is a bit of its own. ls is a 4-bit sub-block scale. Kernels: quant/ref_iq23.cpp
// (scalar), cpu/x86/iq23_256.h (AVX2 / AVX-512), cpu/arm/iq23_neon.h (NEON).

// 2.0625 bpw. Sub-block i is qs[4i .. 4i + 3] read as two little-endian uint32 a, b: bytes of a
// are 4 indices into kIq2xxsGrid (8 magnitudes each), b holds 4 x 7 sign bits (group l at bit
// 7l, expanded to 8 by even parity: kIq2Signs) and ls = b >> 28.
// x = d * (0.5 + ls) * 0.25 * grid * sign.
struct block_iq2_xxs {
    uint16_t d;               // fp16 super-block scale
    uint16_t qs[QK_K / 8];    // grid indices, signs and scales as above
};

// 2.3125 bpw. qs[g] for group g of 8: 9-bit index into kIq2xsGrid, 7 sign bits above it (expanded
// as in iq2_xxs). Sub-block i's groups 0-1 take ls = scales[i] & 15, groups 2-3 scales[i] >> 4.
// x = d * (0.5 + ls) * 0.25 * grid * sign.
struct block_iq2_xs {
    uint16_t d;                 // fp16 super-block scale
    uint16_t qs[QK_K / 8];      // 9-bit grid index | 7 sign bits << 9
    uint8_t scales[QK_K / 32];  // two 4-bit scales per sub-block of 32
};

// 2.5625 bpw. Group g of 8: index qs[g] | (2 bits of qh[g / 4] at 2 * (g % 4)) << 8 into
// kIq2sGrid, 8 explicit sign bits qs[32 + g]; ls as in iq2_xs. x = d * (0.5 + ls) * 0.25 * grid * sign.
struct block_iq2_s {
    uint16_t d;                 // fp16 super-block scale
    uint8_t qs[QK_K / 4];       // low 8 bits of the 32 grid indices, then 32 sign bytes
    uint8_t qh[QK_K / 32];      // high 2 bits of the indices, 4 per byte
    uint8_t scales[QK_K / 32];  // two 4-bit scales per sub-block of 32
};

// 3.0625 bpw. qs[0..63]: one index into kIq3xxsGrid (4 magnitudes) per group of 4; then per
// sub-block i a little-endian uint32 at qs[64 + 4i]: 4 x 7 sign bits (per 8 elements, as in
// iq2_xxs) and ls = that >> 28. x = d * (0.5 + ls) * 0.5 * grid * sign.
struct block_iq3_xxs {
    uint16_t d;                 // fp16 super-block scale
    uint8_t qs[3 * QK_K / 8];   // grid indices, then signs and scales
};

// 3.4375 bpw. Group g of 4: index qs[g] | (bit g % 8 of qh[g / 8]) << 8 into kIq3sGrid; 8
// explicit sign bits per 8 elements; sub-block i takes ls = nibble i % 2 of scales[i / 2].
// x = d * (1 + 2 * ls) * grid * sign.
struct block_iq3_s {
    uint16_t d;                 // fp16 super-block scale
    uint8_t qs[QK_K / 4];       // low 8 bits of the 64 grid indices
    uint8_t qh[QK_K / 32];      // their 9th bits
    uint8_t signs[QK_K / 8];    // one sign bit per element
    uint8_t scales[QK_K / 64];  // 4-bit sub-block scales
};

static_assert(sizeof(block_q4_0) == 18, "q4_0 size must match quant/types.cpp");
static_assert(sizeof(block_q4_1) == 20, "q4_1 size must match quant/types.cpp");
static_assert(sizeof(block_q5_0) == 22, "q5_0 size must match quant/types.cpp");
static_assert(sizeof(block_q5_1) == 24, "q5_1 size must match quant/types.cpp");
static_assert(sizeof(block_q8_0) == 34, "q8_0 size must match quant/types.cpp");
static_assert(sizeof(block_q8_1) == 36, "q8_1 size must match quant/types.cpp");
static_assert(sizeof(block_q2_K) == 84, "q2_K size must match quant/types.cpp");
static_assert(sizeof(block_q3_K) == 110, "q3_K size must match quant/types.cpp");
static_assert(sizeof(block_q4_K) == 144, "q4_K size must match quant/types.cpp");
static_assert(sizeof(block_q5_K) == 176, "q5_K size must match quant/types.cpp");
static_assert(sizeof(block_q6_K) == 210, "q6_K size must match quant/types.cpp");
static_assert(sizeof(block_q8_K) == 292, "q8_K size must match quant/types.cpp");
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl size must match quant/types.cpp");
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs size must match quant/types.cpp");
static_assert(sizeof(block_mxfp4) == 17, "mxfp4 size must match quant/types.cpp");
static_assert(sizeof(block_iq1_s) == 50, "iq1_s size must match quant/types.cpp");
static_assert(sizeof(block_iq1_m) == 56, "iq1_m size must match quant/types.cpp");
static_assert(sizeof(block_tq1_0) == 54, "tq1_0 size must match quant/types.cpp");
static_assert(sizeof(block_tq2_0) == 66, "tq2_0 size must match quant/types.cpp");
static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82 &&
                  sizeof(block_iq3_xxs) == 98 && sizeof(block_iq3_s) == 110,
              "iq2 / iq3 sizes must match quant/types.cpp");

}  // namespace ei
