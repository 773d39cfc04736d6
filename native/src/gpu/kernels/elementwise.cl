// The element-wise ops of a layer, one work-item per value (global size n). The activations are
// computed as the CPU computes them (cpu/x86/ops_avx2.cpp, cpu/gelu_table.h), so that both paths
// feed the same floats to the next quantized matmul.
#pragma OPENCL FP_CONTRACT OFF  // every fma below is spelled out, as the CPU's code has it

// tanh and exp as the CPU's libm gives them (glibc's tanhf and expf are correctly rounded but in
// rare cases; so is the double function rounded to float). OpenCL's float ones may be a few ulp
// off, which matters where 1 + tanh cancels: gelu(-6) is -0 on the CPU, not -2e-7.
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
inline float tanh_libm(float x) { return (float)tanh((double)x); }
inline float expf_libm(float x) { return (float)exp((double)x); }
#else
inline float tanh_libm(float x) { return tanh(x); }
inline float expf_libm(float x) { return exp(x); }
#endif

// x rounded to the nearest F16 (ties to even), back as a float.
inline float round_to_half(float x) {
    ushort h;
    vstore_half_rte(x, 0, (__private half*)&h);
    return vload_half(0, (__private const half*)&h);
}

// ggml's vectorised expf (ggml_v_expf, AVX2 + FMA form, cpu/x86/expf_avx2.h) for one lane:
// x = n ln2 + b with n = round(x / ln2), exp(b) by a degree-5 polynomial j (exp(b) = 1 + j),
// 2^n put into the exponent bits; |n| > 126 goes through two scale factors, |n| > 192
// saturates.
inline float expf_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fma(-n, 0x1.7f7d1cp-20f, fma(-n, 0x1.62e4p-1f, x));
    const uint e = as_uint(z) << 23;
    const float k = as_float(e + as_uint(1.0f));
    const float u = b * b;
    const float j = fma(fma(fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                        0x1.ffffecp-1f * b);
    if (!(fabs(n) > 126.0f)) return fma(j, k, k);
    const uint g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = as_float(g + 0x7f000000u);
    const float s2 = as_float(e - g);
    if (fabs(n) > 192.0f) return s1 * s1;
    return fma(s2, j, s2) * s1;
}

// out = silu(gate) * up, silu(x) = x / (1 + exp(-x)); out may be gate.
__kernel void swiglu(__global const float* gate, __global const float* up, __global float* out) {
    const size_t i = get_global_id(0);
    const float g = gate[i];
    out[i] = (g / (1.0f + expf_ggml(0.0f - g))) * up[i];
}

// gpt-oss's clamped SwiGLU (layers/cpu_blocks.cpp swiglu_oai, llama.cpp's constants):
// g = min(gate, 7), u = clamp(up, -7, 7), out = g / (1 + exp(1.702 * -g)) * (u + 1), exp libm's
// (the CPU's is a scalar loop over std::exp); out may be gate.
__kernel void swiglu_oai(__global const float* gate, __global const float* up, __global float* out) {
    const size_t i = get_global_id(0);
    const float alpha = 1.702f, limit = 7.0f;
    const float x = limit < gate[i] ? limit : gate[i];                                // std::min
    const float y = up[i] < -limit ? -limit : (limit < up[i] ? limit : up[i]);        // std::clamp
    out[i] = (x / (1.0f + expf_libm(alpha * (-x)))) * (y + 1.0f);
}

// out = gelu_tanh(gate) * up; out may be gate. As ggml's F16 table (cpu/gelu_table.h, FMA
// targets): the gate rounded to F16, gelu of that value in float with its inner term fused,
// rounded to F16; past |gate| >= 10, 0 or the gate itself.
__kernel void geglu(__global const float* gate, __global const float* up, __global float* out) {
    const size_t i = get_global_id(0);
    const float x = gate[i];
    const float SQRT_2_OVER_PI = 0.79788456080286535587989211986876f, GELU_COEF_A = 0.044715f;
    if (x <= -10.0f) {
        out[i] = 0.0f;
    } else if (x >= 10.0f) {
        out[i] = x * up[i];
    } else {
        const float h = round_to_half(x);
        const float inner = fma(GELU_COEF_A * h, h, 1.0f);
        const float gelu = round_to_half(0.5f * h * (1.0f + tanh_libm(SQRT_2_OVER_PI * h * inner)));
        out[i] = gelu * up[i];
    }
}

__kernel void scale(__global float* x, float s) {
    const size_t i = get_global_id(0);
    x[i] *= s;
}

// y[y0 + i] += x[x0 + i] (y0, x0: a layer's rows r0.., gpu/ops.h FloatsAt).
__kernel void add(__global float* y, ulong y0, __global const float* x, ulong x0) {
    const size_t i = get_global_id(0);
    y[y0 + i] += x[x0 + i];
}

// y[t][i] += b[i] over rows of `width` values (a bias on every row; global size n * width).
__kernel void add_rows(__global float* y, __global const float* b, int width) {
    const size_t i = get_global_id(0);
    y[i] += b[i % (size_t)width];
}

// dst[t][j] = src[t][c0 + j]: columns c0 .. c0 + width - 1 of rows of `stride` values, packed
// (the parts of a fused projection; global size n * width).
__kernel void take_columns(__global const float* src, __global float* dst, int stride, int c0, int width) {
    const size_t i = get_global_id(0);
    const size_t t = i / (size_t)width, j = i % (size_t)width;
    dst[i] = src[t * (size_t)stride + (size_t)c0 + j];
}
