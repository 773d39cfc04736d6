// Pieces of the split-KV attention kernel over a quantized cache (kernels.h, AttnKvqSpanFn) that
// the scalar reference (cpu/attn_kvq_ref.cpp) and the SIMD version (cpu/x86/attn_kvq_avx2.cpp)
// must compute identically, written once:
//
//   - Q is quantized to 8 bits per 32-value block as Q8_0's from_float does (quant/ref_legacy.cpp,
//     ggml-cpu's x86 quantize_row_q8_0: d = amax / 127, q = round-half-even(x * 127 / amax), d
//     kept as F16), so scores are those of K's vec_dot with a Q8_0 Q,
//     plus the block's sum of q, which turns an unsigned x signed integer dot product into a
//     signed one;
//   - a score is, per chunk of 8 blocks, t_b = (float)isum_b * (dk_b * dq_b) summed as a tree
//     (lanes j and j + w added for w = 4, 2, 1; missing blocks are 0), the chunks' sums added in
//     order, times scale: what one 8-lane vector per chunk computes;
//   - the softmax weight is exp_poly(s - max), a degree-6 Taylor polynomial around n ln 2
//     (relative error < 2e-7 over the range used), the same operations in scalar and SIMD code;
//   - the weights of a span are summed in 16 strided lanes, then lanes j and j + w added for
//     w = 8, 4, 2, 1 (what a 16-lane vector sum does);
//   - V rows are dequantized (d * q: exact in float) and accumulated with one fma per value.
//
// So every ISA gives the same bits; tests assert it.
// Anonymous namespace: each ISA translation unit gets its own copy (see attn_online.h).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/fp16.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace ei {
namespace {

constexpr int64_t kSpanBlock = 32;  // values per Q/K block (QK8_0 == QK4_0)
constexpr int64_t kChunk = 8;       // blocks a score sums as one tree

// Views of AttnKvqSpan::scratch (attn_kvq_span_scratch_floats() floats).
struct SpanScratch {
    int64_t nbp;    // blocks a head, rounded up to whole chunks
    float* p;       // [group][n_pos rounded up to 16] scores, then softmax weights
    int8_t* q8;     // [group][head_dim] quantized Q
    float* dq;      // [group][nbp] Q block scales (0 past nb)
    int32_t* qsum;  // [group][nbp] sum of the block's q (0 past nb)
    SpanScratch(const AttnKvqSpan& a) {
        const int64_t n_pos = a.last - a.first + 1;
        nbp = (a.head_dim / kSpanBlock + kChunk - 1) / kChunk * kChunk;
        p = a.scratch;
        float* rest = a.scratch + a.group * ((n_pos + 15) & ~int64_t(15));
        q8 = reinterpret_cast<int8_t*>(rest);
        dq = rest + a.group * a.head_dim / 4;
        qsum = reinterpret_cast<int32_t*>(dq + a.group * nbp);
    }
};

// Quantizes the n values of one head; dq and qsum get nbp entries (zeros past n / 32).
inline void quantize_q_blocks(const float* x, int64_t n, int64_t nbp, int8_t* q, float* dq, int32_t* qsum) {
    for (int64_t b = n / kSpanBlock; b < nbp; ++b) {
        dq[b] = 0.0f;
        qsum[b] = 0;
    }
    for (int64_t b = 0; b < n / kSpanBlock; ++b) {
        const float* xb = x + b * kSpanBlock;
        float amax = 0.0f;
        for (int j = 0; j < kSpanBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < kSpanBlock; ++j) {
            const int8_t v = (int8_t)std::fmin(127.0f, std::fmax(-128.0f, std::nearbyint(xb[j] * id)));
            q[b * kSpanBlock + j] = v;
            sum += v;
        }
        dq[b] = fp16_to_fp32(fp32_to_fp16(d));
        qsum[b] = sum;
    }
}

// e^x for x <= 0 (0 below -87, where e^x would be subnormal): x = n ln2 + r, |r| <= ln2 / 2.
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682030941723e-6f;
constexpr float kExpC[7] = {1.0f, 1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720};

inline float exp_poly(float x) {
    if (x < -87.0f) return 0.0f;
    const float n = std::nearbyint(x * kLog2e);
    float r = std::fma(-n, kLn2Hi, x);
    r = std::fma(-n, kLn2Lo, r);
    float p = kExpC[6];
    for (int i = 5; i >= 0; --i) p = std::fma(p, r, kExpC[i]);
    return std::ldexp(p, (int)n);
}

// Sum of one chunk's 8 block terms as the tree above.
inline float sum8_tree(float* t) {
    for (int w = 4; w >= 1; w >>= 1)
        for (int j = 0; j < w; ++j) t[j] += t[j + w];
    return t[0];
}

inline float sum16_tree(float* lanes) {
    for (int w = 8; w >= 1; w >>= 1)
        for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
    return lanes[0];
}

}  // namespace
}  // namespace ei
