// The float weight types, read as 32-element chunks: dequant32_<type>(row, c, out) writes
// elements 32c .. 32c + 31 of a row (row: its first byte) to out. A chunk is the unit of work of
// the float matmul kernels (matmul.cl). Quantized weights never become floats on the device:
// they multiply quantized activations (vec_dot.cl), as on the CPU.

inline void dequant32_f32(__global const uchar* row, int c, __private float* out) {
    __global const float* x = (__global const float*)row + 32 * c;
    for (int j = 0; j < 32; ++j) out[j] = x[j];
}

inline void dequant32_f16(__global const uchar* row, int c, __private float* out) {
    __global const half* x = (__global const half*)row + 32 * c;
    for (int j = 0; j < 32; ++j) out[j] = vload_half(j, x);
}
