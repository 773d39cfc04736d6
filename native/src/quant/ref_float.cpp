// Scalar reference kernels of the plain float types: F32, F16, BF16.
// Dot products follow ggml's scalar path: each product in float, summed in double
// (ggml_float), rounded to float once at the end.
#include <cstring>

#include "common/fp16.h"
#include "quant/ref.h"

namespace ei {
namespace ref {

void to_float_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * sizeof(float)); }

void to_float_f16(const void* src, float* dst, int64_t n) {
    const uint16_t* x = (const uint16_t*)src;
    for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(x[i]);
}

void to_float_bf16(const void* src, float* dst, int64_t n) {
    const uint16_t* x = (const uint16_t*)src;
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(x[i]);
}

void from_float_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * sizeof(float)); }

void from_float_f16(const float* src, void* dst, int64_t n) {
    uint16_t* y = (uint16_t*)dst;
    for (int64_t i = 0; i < n; i++) y[i] = fp32_to_fp16(src[i]);
}

void from_float_bf16(const float* src, void* dst, int64_t n) {
    uint16_t* y = (uint16_t*)dst;
    for (int64_t i = 0; i < n; i++) y[i] = fp32_to_bf16(src[i]);
}

void vec_dot_f32(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = (const float*)vx;
    const float* y = (const float*)vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

void vec_dot_f16(int64_t n, float* s, const void* vx, const void* vy) {
    const uint16_t* x = (const uint16_t*)vx;
    const uint16_t* y = (const uint16_t*)vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
    *s = (float)sum;
}

void vec_dot_bf16(int64_t n, float* s, const void* vx, const void* vy) {
    const uint16_t* x = (const uint16_t*)vx;
    const uint16_t* y = (const uint16_t*)vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    *s = (float)sum;
}

}  // namespace ref
}  // namespace ei
