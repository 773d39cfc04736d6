// Scalar reference kernels of the 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//
// Dequantization is bit-identical with gguf.quants.dequantize (one float multiply, plus one
// float add for the types with a minimum; never fused). Dot products take the weight row x
// against activations y already quantized to the weight type's vec_dot_type (Q8_0 or Q8_1),
// form the exact integer sum per block, and combine blocks in float:
//   q4_0, q5_0, q8_0:  s += (d_x * d_y) * sum(qx * qy)              (qx centred: q - 8, q - 16)
//   q4_1, q5_1:        s += (d_x * d_y) * sum(qx * qy) + m_x * s_y    (s_y = fp16(d_y * sum qy))
// which is ggml's formula; only the float summation order differs from the SIMD versions.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/ref.h"

namespace ei {
namespace ref {

namespace {

// The 32 5-bit quants of a q5 block (low nibble | fifth bit << 4), in element order.
template <typename Block>
void unpack_q5(const Block& b, int q[32]) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (b.qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
        q[j + 16] = (b.qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
    }
}

// The q8 quantization of one 32-element block, exactly as ggml-cpu's x86 quantize_row_q8_0 /
// quantize_row_q8_1 (AVX2 path) compute it: d = amax / 127, id = 127 / amax (0 if amax == 0),
// q = round-half-even(x * id) saturated to int8. Returns d (before its fp16 rounding).
float quantize_block_q8(const float* x, int8_t* qs, int* sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; j++) {
        // nearbyint rounds half to even in the default rounding mode, like _mm256_round_ps.
        const float r = std::nearbyint(x[j] * id);
        const int q = (int)std::min(127.0f, std::max(-128.0f, r));
        qs[j] = (int8_t)q;
        s += q;
    }
    *sum = s;
    return d;
}

}  // namespace

// ---- to_float ----------------------------------------------------------------------------

void to_float_q4_0(const void* src, float* dst, int64_t n) {
    const block_q4_0* x = (const block_q4_0*)src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)((x[i].qs[j] & 0x0F) - 8);
            dst[j + 16] = d * (float)((x[i].qs[j] >> 4) - 8);
        }
    }
}

void to_float_q4_1(const void* src, float* dst, int64_t n) {
    const block_q4_1* x = (const block_q4_1*)src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        const float d = fp16_to_fp32(x[i].d);
        const float m = fp16_to_fp32(x[i].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)(x[i].qs[j] & 0x0F) + m;
            dst[j + 16] = d * (float)(x[i].qs[j] >> 4) + m;
        }
    }
}

void to_float_q5_0(const void* src, float* dst, int64_t n) {
    const block_q5_0* x = (const block_q5_0*)src;
    int q[32];
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = fp16_to_fp32(x[i].d);
        unpack_q5(x[i], q);
        for (int j = 0; j < 32; j++) dst[j] = d * (float)(q[j] - 16);
    }
}

void to_float_q5_1(const void* src, float* dst, int64_t n) {
    const block_q5_1* x = (const block_q5_1*)src;
    int q[32];
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        const float d = fp16_to_fp32(x[i].d);
        const float m = fp16_to_fp32(x[i].m);
        unpack_q5(x[i], q);
        for (int j = 0; j < 32; j++) dst[j] = d * (float)q[j] + m;
    }
}

void to_float_q8_0(const void* src, float* dst, int64_t n) {
    const block_q8_0* x = (const block_q8_0*)src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < 32; j++) dst[j] = (float)x[i].qs[j] * d;
    }
}

void to_float_q8_1(const void* src, float* dst, int64_t n) {
    const block_q8_1* x = (const block_q8_1*)src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < 32; j++) dst[j] = (float)x[i].qs[j] * d;
    }
}

// ---- activation quantizers ---------------------------------------------------------------

void from_float_q8_0(const float* src, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        int sum;
        y[i].d = fp32_to_fp16(quantize_block_q8(src, y[i].qs, &sum));
    }
}

void from_float_q8_1(const float* src, void* dst, int64_t n) {
    block_q8_1* y = (block_q8_1*)dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        int sum;
        const float d = quantize_block_q8(src, y[i].qs, &sum);
        y[i].d = fp32_to_fp16(d);
        y[i].s = fp32_to_fp16(d * (float)sum);  // unrounded d, as ggml
    }
}

// ---- dot products ------------------------------------------------------------------------

void vec_dot_q4_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_0* x = (const block_q4_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sumf += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * (float)sumi;
    }
    *s = sumf;
}

void vec_dot_q4_1_q8_1(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q4_1* x = (const block_q4_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sumf += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * (float)sumi +
                fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    *s = sumf;
}

void vec_dot_q5_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_0* x = (const block_q5_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sumf = 0.0f;
    int q[32];
    for (int64_t i = 0; i < n / QK8_0; i++) {
        unpack_q5(x[i], q);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += (q[j] - 16) * y[i].qs[j];
        sumf += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * (float)sumi;
    }
    *s = sumf;
}

void vec_dot_q5_1_q8_1(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q5_1* x = (const block_q5_1*)vx;
    const block_q8_1* y = (const block_q8_1*)vy;
    float sumf = 0.0f;
    int q[32];
    for (int64_t i = 0; i < n / QK8_1; i++) {
        unpack_q5(x[i], q);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += q[j] * y[i].qs[j];
        sumf += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * (float)sumi +
                fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    *s = sumf;
}

void vec_dot_q8_0_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_q8_0* x = (const block_q8_0*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sumf += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * (float)sumi;
    }
    *s = sumf;
}

}  // namespace ref
}  // namespace ei
