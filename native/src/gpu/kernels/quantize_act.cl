// Activations quantized to the weight type's vec_dot type, byte for byte as the CPU's from_float
// does (quant/ref_legacy.cpp and ref_kquants.cpp, which equal ggml-cpu's x86 quantizers), so the
// device's quantized dot products (vec_dot.cl) see the same integers as the CPU's.
//   x: [n][cols] floats;  y: [n] rows of cols / block-size blocks of the activation type.
// Global size (cols / block-size, n): one work-item per block.
//
// Bit-exactness needs IEEE arithmetic: no contraction of a * b + c into an fma (OpenCL C allows
// it by default), and correctly rounded division (the host builds this program with
// -cl-fp32-correctly-rounded-divide-sqrt where the device has it, see ops.cpp).
#pragma OPENCL FP_CONTRACT OFF

// Q8_0 / Q8_1: d = amax / 127, q = round-half-even(x * (127 / amax)) (0 if amax is 0), saturated
// to int8. Returns d before its fp16 rounding; *sum gets the sum of the q.
inline float quantize_block_q8(__global const float* x, __global char* qs, int* sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = fmax(amax, fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; ++j) {
        const int q = (int)clamp(rint(x[j] * id), -128.0f, 127.0f);  // rint: half to even
        qs[j] = (char)q;
        s += q;
    }
    *sum = s;
    return d;
}

__kernel void quantize_q8_0(__global const float* x, __global block_q8_0* y, int cols) {
    const int b = get_global_id(0), t = get_global_id(1), nb = cols / QK8_0;
    __global block_q8_0* out = y + (ulong)t * nb + b;
    int sum;
    const float d = quantize_block_q8(x + (ulong)t * cols + QK8_0 * b, out->qs, &sum);
    vstore_half_rte(d, 0, (__global half*)&out->d);
}

__kernel void quantize_q8_1(__global const float* x, __global block_q8_1* y, int cols) {
    const int b = get_global_id(0), t = get_global_id(1), nb = cols / QK8_1;
    __global block_q8_1* out = y + (ulong)t * nb + b;
    int sum;
    const float d = quantize_block_q8(x + (ulong)t * cols + QK8_1 * b, out->qs, &sum);
    vstore_half_rte(d, 0, (__global half*)&out->d);
    vstore_half_rte(d * (float)sum, 0, (__global half*)&out->s);  // the unrounded d, as the CPU
}

// Q8_K (ggml's quantize_row_q8_K_ref): max = the first element of largest magnitude, with its
// sign; iscale = -127 / max; q = round-half-even(iscale * x) capped at 127; d = 1 / iscale;
// bsums[g] = the sum of q over element group g of 16. An all-zero block is all zeros.
__kernel void quantize_q8_K(__global const float* x, __global block_q8_K* y, int cols) {
    const int b = get_global_id(0), t = get_global_id(1), nb = cols / QK_K;
    __global const float* xb = x + (ulong)t * cols + QK_K * b;
    __global block_q8_K* out = y + (ulong)t * nb + b;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
        const float ax = fabs(xb[j]);
        if (ax > amax) {  // strict: the first one wins
            amax = ax;
            max = xb[j];
        }
    }
    if (amax == 0.0f) {
        out->d = 0.0f;
        for (int j = 0; j < QK_K; ++j) out->qs[j] = 0;
        for (int g = 0; g < QK_K / 16; ++g) out->bsums[g] = 0;
        return;
    }
    const float iscale = -127.0f / max;
    for (int g = 0; g < QK_K / 16; ++g) {
        int sum = 0;
        for (int j = 16 * g; j < 16 * g + 16; ++j) {
            const int q = min((int)rint(iscale * xb[j]), 127);
            out->qs[j] = (char)q;
            sum += q;
        }
        out->bsums[g] = (short)sum;
    }
    out->d = 1.0f / iscale;
}
