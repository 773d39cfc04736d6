// AVX-512 float ops: ggml-cpu's vec.h / vec.cpp kernels as an -march=native build on an AVX-512
// machine compiles them (GGML_F16_STEP 64, GGML_F16_EPR 16: four 16-lane accumulators; F16
// loads/stores through vcvtph2ps / vcvtps2ph with round-to-nearest-even), operation for
// operation, so the results are bit-identical to llama.cpp's, not just close. Compiled with
// -ffp-contract=fast like ggml (GNU dialects contract a*b+c into FMA); where a contraction
// matters it is written as an explicit fma, so the result does not hinge on the optimizer.
#include <immintrin.h>

// GCC 12's unmasked AVX-512 intrinsics pass _mm512_undefined_ps() as the merge source, which
// -Wmaybe-uninitialized reports as a use of an uninitialized value: a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>

#include "common/fp16.h"
#include "cpu/attn_online.h"
#include "cpu/kernels.h"
#include "cpu/x86/ops_fma.h"

namespace ei {

namespace {

constexpr int64_t kF16Step = 64;  // GGML_F16_STEP
constexpr int64_t kF16Epr = 16;   // GGML_F16_EPR (GGML_F16_ARR = 4 registers a step)

inline __m512 load_f16x16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p)); }
inline void store_f16x16(uint16_t* p, __m512 v) {
    _mm256_storeu_si256((__m256i*)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

struct Avx512F16Prims {
    static void to_f16(const float* x, uint16_t* y, int64_t n) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) store_f16x16(y + i, _mm512_loadu_ps(x + i));
        for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
    }

    // ggml_vec_dot_f16: four accumulators, each an FMA chain over every fourth register; then
    // (0+2, 1+3), (0+1), _mm512_reduce_add_ps; the tail is added in double.
    static float dot(int64_t n, const uint16_t* x, const uint16_t* y) {
        const int64_t np = n & ~(kF16Step - 1);
        __m512 sum[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t i = 0; i < np; i += kF16Step)
            for (int j = 0; j < 4; ++j)
                sum[j] = _mm512_fmadd_ps(load_f16x16(x + i + j * kF16Epr), load_f16x16(y + i + j * kF16Epr), sum[j]);
        sum[0] = _mm512_add_ps(sum[0], sum[2]);
        sum[1] = _mm512_add_ps(sum[1], sum[3]);
        sum[0] = _mm512_add_ps(sum[0], sum[1]);
        double sumf = (double)_mm512_reduce_add_ps(sum[0]);
        for (int64_t i = np; i < n; ++i) sumf += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
        return (float)sumf;
    }

    // ggml_vec_scale_f16
    static void scale(int64_t n, uint16_t* y, float v) {
        const int64_t np = n & ~(kF16Step - 1);
        const __m512 vx = _mm512_set1_ps(v);
        for (int64_t i = 0; i < np; i += kF16Epr) store_f16x16(y + i, _mm512_mul_ps(load_f16x16(y + i), vx));
        for (int64_t i = np; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
    }

    // ggml_vec_mad_f16: y = fma(x, v, y) a lane, rounded back to F16 (the scalar tail is
    // contracted to the same fma by GCC).
    static void mad(int64_t n, uint16_t* y, const uint16_t* x, float v) {
        const int64_t np = n & ~(kF16Step - 1);
        const __m512 vx = _mm512_set1_ps(v);
        for (int64_t i = 0; i < np; i += kF16Epr)
            store_f16x16(y + i, _mm512_fmadd_ps(load_f16x16(x + i), vx, load_f16x16(y + i)));
        for (int64_t i = np; i < n; ++i) y[i] = fp32_to_fp16(std::fma(fp16_to_fp32(x[i]), v, fp16_to_fp32(y[i])));
    }

    // `S = S*ms + vs` in ops.cpp, contracted by GCC.
    static float sum_update(float S, float ms, float vs) { return std::fma(S, ms, vs); }
};

void attn_f16_rows_avx512(const AttnF16Query* queries, int64_t n_queries, const uint16_t* k, const uint16_t* v,
                        int64_t kv_stride, int64_t head_dim, float scale, uint16_t* scratch) {
    attend_rows_f16<Avx512F16Prims>(queries, n_queries, k, v, kv_stride, head_dim, scale, scratch);
}

// ggml_v_expf (AVX-512F/DQ): ARM's optimized-routines expf polynomial, max error 1.45 + 0.5 ulp;
// x > 88.38 gives inf, x < -103.97 gives 0.
inline __m512 expf16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (_mm512_kortestz(d, d)) return res;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
    return _mm512_mask_blend_ps(d, res, alt);
}

// ggml_v_silu: x / (1 + exp(-x))
inline __m512 silu16(__m512 x) {
    const __m512 neg_x = _mm512_sub_ps(_mm512_setzero_ps(), x);
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), expf16(neg_x)));
}

// ggml_vec_swiglu_f32: 16 at a time, then ggml_silu_f32 (libm expf) for the tail.
void swiglu_avx512(int64_t n, const float* gate, const float* up, float* out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
    for (; i < n; ++i) {
        const float g = gate[i];
        out[i] = (g / (1.0f + std::exp(-g))) * up[i];
    }
}

// ggml_vec_soft_max_f32's AVX-512F/DQ branch: 16 at a time, each vector's sum by
// _mm512_reduce_add_ps added to the double sum; libm's expf for the tail.
double soft_max_avx512(int64_t n, const float* x, float max, float* y) {
    int64_t i = 0;
    double sum = 0.0;
    for (; i + 16 <= n; i += 16) {
        const __m512 val = expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)));
        _mm512_storeu_ps(y + i, val);
        sum += (double)_mm512_reduce_add_ps(val);
    }
    return soft_max_tail(i, n, x, max, y, sum);
}

}  // namespace

void fill_ops_avx512(OpKernels& ops) {
    ops.attn_f16_rows = attn_f16_rows_avx512;
    ops.swiglu = swiglu_avx512;
    ops.rope_rotate = rope_rotate_fma;
    ops.rope_rotate_neox = rope_rotate_neox_fma;
    ops.geglu = geglu_fma;
    ops.soft_max = soft_max_avx512;
}

}  // namespace ei
