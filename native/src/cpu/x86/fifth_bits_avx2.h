// The fifth bits of 5-bit values stored as a nibble plus one bit (Q5_0, Q5_K in 16-row groups,
// cpu/repack.h): each row's byte holds the bits of its 4-byte piece's four low-nibble values (bits
// 0-3) and four high-nibble values (bits 4-7). Included by the AVX2 units (anonymous namespace:
// each gets its own copy).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace ei {
namespace {

// What the fifth bits of 8 rows add, from their bytes spread (row j's byte in all 4 bytes of
// int32 lane j): lo16 byte b of lane j is 16 if bit b of row j's byte is set, else 0; hi16 likewise
// for bit 4 + b. Byte b keeps bit b, which a 16-entry table (VPSHUFB) turns into 16, and bit 4 + b,
// which is 16 << b, clamped to 16 (VPMINUB).
inline void fifth_bits_spread(__m256i h, __m256i& lo16, __m256i& hi16) {
    const __m256i bit_lo = _mm256_set1_epi32(0x08040201), bit_hi = _mm256_set1_epi32((int)0x80402010);
    const __m256i fifth = _mm256_setr_epi8(0, 16, 16, 0, 16, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0,  // [1, 2, 4, 8] = 16
                                           0, 16, 16, 0, 16, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0);
    lo16 = _mm256_shuffle_epi8(fifth, _mm256_and_si256(h, bit_lo));
    hi16 = _mm256_min_epu8(_mm256_and_si256(h, bit_hi), _mm256_set1_epi8(16));
}

// The same for 8 rows' bytes at p[0..7] (row j's in int32 lane j), each copied to its row's 4
// bytes (VPSHUFB).
inline void fifth_bits_8rows(const uint8_t* p, __m256i& lo16, __m256i& hi16) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,  // rows 0-3
                                            4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);  // rows 4-7
    int64_t bits8;
    std::memcpy(&bits8, p, 8);
    fifth_bits_spread(_mm256_shuffle_epi8(_mm256_set1_epi64x(bits8), spread), lo16, hi16);
}

}  // namespace
}  // namespace ei
