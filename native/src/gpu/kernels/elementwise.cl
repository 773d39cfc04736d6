// The element-wise ops of a layer, one work-item per value (global size n).

// out = silu(gate) * up; out may be gate.
__kernel void swiglu(__global const float* gate, __global const float* up, __global float* out) {
    const size_t i = get_global_id(0);
    const float g = gate[i];
    out[i] = g / (1.0f + exp(-g)) * up[i];
}

// out = gelu_tanh(gate) * up; out may be gate. The CPU looks gelu up in ggml's F16 table (gate
// rounded to F16); here it is computed in float, so results differ by about an F16 ulp of gate.
__kernel void geglu(__global const float* gate, __global const float* up, __global float* out) {
    const size_t i = get_global_id(0);
    const float g = gate[i];
    const float SQRT_2_OVER_PI = 0.79788456080286535588f, GELU_COEF_A = 0.044715f;
    // Past |g| = 10 gelu is g or 0 to float precision (and tanh's argument would only grow).
    float gelu;
    if (g > 10.0f) gelu = g;
    else if (g < -10.0f) gelu = 0.0f;
    else gelu = 0.5f * g * (1.0f + tanh(SQRT_2_OVER_PI * g * (1.0f + GELU_COEF_A * g * g)));
    out[i] = gelu * up[i];
}

// y += x (the residual connection).
__kernel void add(__global float* y, __global const float* x) {
    const size_t i = get_global_id(0);
    y[i] += x[i];
}
