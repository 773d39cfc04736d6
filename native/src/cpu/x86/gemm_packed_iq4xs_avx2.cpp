// AVX2 GEMV/GEMM over IQ4_XS weights repacked into 16-row groups, in FloatOrder::fast (cpu/repack.h
// has the layout and the float order; bit for bit the scalar reference in cpu/repack.cpp and the
// AVX-512 kernel in gemm_packed_iq4xs_avx512.cpp, for any number of columns).
//
// A group's 64-byte pieces are two 256-bit halves, rows 0..7 and 8..15 (row 8h + j in int32 lane j
// of half h). A sub-block's half splits into low and high nibbles, looked up (VPSHUFB) into the
// signed table values: eight registers, the 8 rows' 32 values in [-127, 113]. Without VNNI the
// products take VPMADDUBSW, which wants one operand unsigned: |q_w| against the activation bytes
// carrying q_w's sign (VPSIGNB), as ggml's mul_sum_i8_pairs does; a pair is at most 2 * 127 * 127
// = 32258, so it does not saturate, and VPMADDWD against the rows' scales (ls - 32 in both int16 of
// a row's lane) takes each piece's pairs to int32 at once, scaled: exact. The sub-block's eight
// pieces summed, the super-block's sum is the scalar reference's integer; one convert, one
// multiply (d_w * d_a) and one FMA per super-block and column finish 8 outputs.
//
// A sub-block's halves are unpacked in turn and each goes through every column of the panel, so
// the group is walked once; the first panel requests the next group ahead.
#include <immintrin.h>

#include <cstring>

#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "cpu/x86/packed_panels.h"
#include "cpu/x86/gemm_avx2.h"
#include "cpu/x86/kernel_function.h"
#include "cpu/x86/request_ahead.h"
#include "quant/blocks.h"

namespace ei {
namespace {

// Activation columns per panel (as Q6_K's kernel: the 16 registers hold little more).
constexpr int kCols = 4;
constexpr int kSubs = QK_K / 32;  // sub-blocks of a super-block, four 64-byte pieces each

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// One group's 16 rows x NC columns into y[c][0..15], as two halves of 8 rows, a sub-block at a
// time. With prefetch > 0, requests the group's lines `prefetch` bytes on (the next group's).
template <int NC>
EI_KERNEL_FUNCTION
void tile(int64_t nb, const uint8_t* grp, const PackedLayout& lay, const block_q8_K* const* act, float* y,
          int64_t ldy, size_t prefetch) {
    const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
    const int8_t* sc = reinterpret_cast<const int8_t*>(grp + lay.sc);
    const uint8_t* qs = grp + lay.qs;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)kIq4nlValues));
    const __m256i low = _mm256_set1_epi8(15);
    __m256 acc[NC][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        __m256i isum[NC][2];
        for (auto& v : isum) v[0] = v[1] = _mm256_setzero_si256();
        if (prefetch) {
            request_ahead<3, NC>(reinterpret_cast<const uint8_t*>(d + i * kPackRows), prefetch);
            for (int t = 0; t < 2; ++t) request_ahead<3, NC>(sc + (i * kSubs + 4 * t) * kPackRows, prefetch);
        }
        for (int s = 0; s < kSubs; ++s) {
            const uint8_t* q = qs + (i * kSubs + s) * 4 * 64;
            if (prefetch)  // into L2 only, as the other packed kernels do
                for (int t = 0; t < 4; ++t) request_ahead<1, NC>(q + t * 64, prefetch);
            const __m128i s8 = _mm_load_si128((const __m128i*)(sc + (i * kSubs + s) * kPackRows));
            const __m256i scale[2] = {_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8)),   // (sc_j, sc_j) in lane j
                                      _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(s8, s8))};
            for (int h = 0; h < 2; ++h) {
                __m256i wq[8];  // wq[t]: elements 4t..4t+3 of the half's rows (t >= 4: 16 + 4(t - 4)..)
                for (int t = 0; t < 4; ++t) {
                    const __m256i v = _mm256_load_si256((const __m256i*)(q + t * 64 + 32 * h));
                    wq[t] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
                    wq[t + 4] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
                }
                for (int c = 0; c < NC; ++c) {
                    const int8_t* aq = act[c][i].qs + 32 * s;
                    __m256i sum[2];
                    for (int u = 0; u < 2; ++u) {  // two chains of four pieces
                        sum[u] = _mm256_setzero_si256();
                        for (int t = 4 * u; t < 4 * u + 4; ++t) {
                            const __m256i a = _mm256_sign_epi8(bcast4(aq + 4 * t), wq[t]);
                            const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wq[t], wq[t]), a);
                            sum[u] = _mm256_add_epi32(sum[u], _mm256_madd_epi16(pairs, scale[h]));
                        }
                    }
                    isum[c][h] = _mm256_add_epi32(isum[c][h], _mm256_add_epi32(sum[0], sum[1]));
                }
            }
        }
        for (int h = 0; h < 2; ++h) {
            const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)(d + i * kPackRows + 8 * h)));
            for (int c = 0; c < NC; ++c) {
                const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(act[c][i].d));
                acc[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c][h]), dd, acc[c][h]);
            }
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + c * ldy + 8 * h, acc[c][h]);
}

void gemm_packed_iq4_xs(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                        float* y, int64_t ldy) {
    run_packed_superblocks<kCols, TYPE_IQ4_XS>(k, m, n, w, w_stride, a, a_stride, y, ldy,
                                       [](auto nc, auto&&... args) { tile<decltype(nc)::value>(args...); });
}

}  // namespace

void fill_gemm_packed_fast_iq4xs_avx2(KernelTable& t) { t.types[TYPE_IQ4_XS].gemm_16row_groups = gemm_packed_iq4_xs; }

}  // namespace ei
