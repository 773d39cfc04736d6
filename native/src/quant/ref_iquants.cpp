// Scalar reference kernels of the i-quants with a non-linear 4-bit table: IQ4_NL (32-element
// blocks, against Q8_0 activations) and IQ4_XS (256-element super-blocks with 6-bit sub-block
// scales, against Q8_K).
//
// Dequantization is bit-identical with gguf.quants.dequantize (IQ4_XS: the sub-block scale
// d * (ls - 32) rounded to float first, then times the table value). Dot products form the exact
// integer sum of each 32-element (sub-)block and combine in float in ggml's generic order:
//   iq4_nl:  s += (d_y * d_x) * sum(v(q_x) * q_y)                     per block
//   iq4_xs:  s += ((d_x * d_y) * (ls - 32)) * sum(v(q_x) * q_y)        per sub-block
// vec_dot_iq4_xs_q8_K_tiled is IQ4_XS in the order of ggml-cpu's tiled GEMM (tiled.cpp), which
// llama.cpp runs on x86 for batches of 8 rows and more (it does not repack IQ4_XS): per
// super-block the exact integer isum = sum over sub-blocks of (ls - 32) * sum(v(q_x) * q_y), then
//   r = (float)isum * d_x,  acc = fma(r, d_y, acc)
// (the epilogue's add contracted, as for the k-quants: cpu/x86/kquants_256.h). |isum| < 2^28, so
// its conversion may round, the same way in both. IQ4_NL has no such order: ggml repacks it.
#include <cmath>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/ref.h"

namespace ei {
namespace ref {

namespace {

// The 6-bit scale of sub-block ib (0..7) of an IQ4_XS super-block, as stored (0..63).
int iq4_xs_scale(const block_iq4_xs& b, int ib) {
    return ((b.scales_l[ib / 2] >> 4 * (ib % 2)) & 15) | ((b.scales_h >> 2 * ib) & 3) << 4;
}

}  // namespace

int table4_dot_32(const uint8_t* qs, const int8_t* a, const int8_t* values) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
        sum += a[j] * values[qs[j] & 15];
        sum += a[j + 16] * values[qs[j] >> 4];
    }
    return sum;
}

void to_float_iq4_nl(const void* src, float* dst, int64_t n) {
    const block_iq4_nl* x = (const block_iq4_nl*)src;
    for (int64_t i = 0; i < n / QK4_NL; ++i, dst += QK4_NL) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = d * kIq4nlValues[x[i].qs[j] & 15];
            dst[j + 16] = d * kIq4nlValues[x[i].qs[j] >> 4];
        }
    }
}

void to_float_iq4_xs(const void* src, float* dst, int64_t n) {
    const block_iq4_xs* x = (const block_iq4_xs*)src;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib, dst += 32) {
            const float dl = d * (float)(iq4_xs_scale(x[i], ib) - 32);
            const uint8_t* qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; ++j) {
                dst[j] = dl * kIq4nlValues[qs[j] & 15];
                dst[j + 16] = dl * kIq4nlValues[qs[j] >> 4];
            }
        }
    }
}

void vec_dot_iq4_nl_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq4_nl* x = (const block_iq4_nl*)vx;
    const block_q8_0* y = (const block_q8_0*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; ++i) {
        const float d = fp16_to_fp32(y[i].d) * fp16_to_fp32(x[i].d);
        sumf += d * (float)table4_dot_32(x[i].qs, y[i].qs, kIq4nlValues);
    }
    *s = sumf;
}

void vec_dot_iq4_xs_q8_K_tiled(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq4_xs* x = (const block_iq4_xs*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int32_t isum = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib)
            isum += (iq4_xs_scale(x[i], ib) - 32) * table4_dot_32(x[i].qs + 16 * ib, y[i].qs + 32 * ib, kIq4nlValues);
        acc = std::fma((float)isum * fp16_to_fp32(x[i].d), y[i].d, acc);
    }
    *s = acc;
}

void vec_dot_iq4_xs_q8_K(int64_t n, float* s, const void* vx, const void* vy) {
    const block_iq4_xs* x = (const block_iq4_xs*)vx;
    const block_q8_K* y = (const block_q8_K*)vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d4d8 = fp16_to_fp32(x[i].d) * y[i].d;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float dl = d4d8 * (float)(iq4_xs_scale(x[i], ib) - 32);
            sumf += dl * (float)table4_dot_32(x[i].qs + 16 * ib, y[i].qs + 32 * ib, kIq4nlValues);
        }
    }
    *s = sumf;
}

}  // namespace ref
}  // namespace ei
