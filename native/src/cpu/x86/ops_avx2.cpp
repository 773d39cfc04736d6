// AVX2 + FMA + F16C float ops: ggml-cpu's vec.h / vec.cpp kernels as an -march=native build on
// an AVX2 (no AVX-512) machine compiles them: ggml's __AVX__ mappings (GGML_F16_STEP 32,
// GGML_F16_EPR 8: four 8-lane accumulators; F16 through vcvtph2ps / vcvtps2ph), operation for
// operation. Compiled with -ffp-contract=fast like ggml; contractions that matter are explicit.
#include <immintrin.h>

#include <cmath>

#include "common/fp16.h"
#include "cpu/attn_online.h"
#include "cpu/kernels.h"
#include "cpu/x86/expf_avx2.h"
#include "cpu/x86/ops_fma.h"

namespace ei {

namespace {

constexpr int64_t kF16Step = 32;  // GGML_F16_STEP
constexpr int64_t kF16Epr = 8;    // GGML_F16_EPR (GGML_F16_ARR = 4 registers a step)

inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
inline void store_f16x8(uint16_t* p, __m256 v) {
    _mm_storeu_si128((__m128i*)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

struct Avx2F16Prims {
    static void to_f16(const float* x, uint16_t* y, int64_t n) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) store_f16x8(y + i, _mm256_loadu_ps(x + i));
        for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
    }

    // ggml_vec_dot_f16 with GGML_F32x8_REDUCE: (0+2, 1+3), (0+1), low half + high half, two hadds.
    static float dot(int64_t n, const uint16_t* x, const uint16_t* y) {
        const int64_t np = n & ~(kF16Step - 1);
        __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t i = 0; i < np; i += kF16Step)
            for (int j = 0; j < 4; ++j)
                sum[j] = _mm256_fmadd_ps(load_f16x8(x + i + j * kF16Epr), load_f16x8(y + i + j * kF16Epr), sum[j]);
        sum[0] = _mm256_add_ps(sum[0], sum[2]);
        sum[1] = _mm256_add_ps(sum[1], sum[3]);
        sum[0] = _mm256_add_ps(sum[0], sum[1]);
        const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(sum[0]), _mm256_extractf128_ps(sum[0], 1));
        const __m128 t1 = _mm_hadd_ps(t0, t0);
        double sumf = (double)_mm_cvtss_f32(_mm_hadd_ps(t1, t1));
        for (int64_t i = np; i < n; ++i) sumf += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
        return (float)sumf;
    }

    static void scale(int64_t n, uint16_t* y, float v) {
        const int64_t np = n & ~(kF16Step - 1);
        const __m256 vx = _mm256_set1_ps(v);
        for (int64_t i = 0; i < np; i += kF16Epr) store_f16x8(y + i, _mm256_mul_ps(load_f16x8(y + i), vx));
        for (int64_t i = np; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
    }

    static void mad(int64_t n, uint16_t* y, const uint16_t* x, float v) {
        const int64_t np = n & ~(kF16Step - 1);
        const __m256 vx = _mm256_set1_ps(v);
        for (int64_t i = 0; i < np; i += kF16Epr)
            store_f16x8(y + i, _mm256_fmadd_ps(load_f16x8(x + i), vx, load_f16x8(y + i)));
        for (int64_t i = np; i < n; ++i) y[i] = fp32_to_fp16(std::fma(fp16_to_fp32(x[i]), v, fp16_to_fp32(y[i])));
    }

    static float sum_update(float S, float ms, float vs) { return std::fma(S, ms, vs); }
};

void attn_f16_rows_avx2(const AttnF16Query* queries, int64_t n_queries, const uint16_t* k, const uint16_t* v,
                        int64_t kv_stride, int64_t head_dim, float scale, uint16_t* scratch) {
    attend_rows_f16<Avx2F16Prims>(queries, n_queries, k, v, kv_stride, head_dim, scale, scratch);
}

inline __m256 silu8(__m256 x) {
    const __m256 neg_x = _mm256_sub_ps(_mm256_setzero_ps(), x);
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), expf8(neg_x)));
}

void swiglu_avx2(int64_t n, const float* gate, const float* up, float* out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
    for (; i < n; ++i) {
        const float g = gate[i];
        out[i] = (g / (1.0f + std::exp(-g))) * up[i];
    }
}

// ggml_vec_soft_max_f32's AVX2 + FMA branch: 8 at a time, each vector's sum reduced 8 -> 4 -> 2 -> 1
// in float and added to the double sum; libm's expf for the tail.
double soft_max_avx2(int64_t n, const float* x, float max, float* y) {
    int64_t i = 0;
    double sum = 0.0;
    for (; i + 8 <= n; i += 8) {
        const __m256 val = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
        _mm256_storeu_ps(y + i, val);
        __m128 s = _mm_add_ps(_mm256_extractf128_ps(val, 1), _mm256_castps256_ps128(val));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        sum += (double)_mm_cvtss_f32(s);
    }
    return soft_max_tail(i, n, x, max, y, sum);
}

}  // namespace

void fill_ops_avx2(OpKernels& ops) {
    ops.attn_f16_rows = attn_f16_rows_avx2;
    ops.swiglu = swiglu_avx2;
    ops.rope_rotate = rope_rotate_fma;
    ops.rope_rotate_neox = rope_rotate_neox_fma;
    ops.geglu = geglu_fma;
    ops.soft_max = soft_max_avx2;
}

}  // namespace ei
