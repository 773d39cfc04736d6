// Rotary position embedding in place on x: [n][n_heads][head_dim], token t rotated by the table
// cs: [n][n_rot] (cos, sin of pair i at cs[2i], cs[2i + 1]), which the host builds with the
// CPU's own function (layers/params.h rope_cos_sin), so both paths turn by the same floats.
// The first n_rot dims of each head rotate, the rest are left alone. Normal mode pairs dims 2i
// and 2i + 1 (llama); neox mode pairs dims i and i + n_rot / 2 (Gemma, Qwen, GPT-NeoX).
// Global size (n_rot / 2, n_heads, n): one work-item per pair.
//
// The products are rounded as the CPU's FMA builds round them (cpu/x86/ops_fma.h): the product
// with x0 fused, the one with x1 rounded; normal mode leaves a tail of fewer than 4 pairs
// (n_rot not a multiple of 8) unfused.
#pragma OPENCL FP_CONTRACT OFF

__kernel void rope(__global float* x, __global const float* cs, int n_heads, int head_dim, int n_rot, int neox) {
    const int i = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    const float c = cs[(ulong)t * n_rot + 2 * i], s = cs[(ulong)t * n_rot + 2 * i + 1];
    __global float* head = x + ((ulong)t * n_heads + h) * head_dim;
    const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    if (neox || 2 * i < (n_rot & ~7)) {
        head[a] = fma(x0, c, -(x1 * s));
        head[b] = fma(x0, s, x1 * c);
    } else {
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}
