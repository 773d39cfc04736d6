// Rotary position embedding in place on x: [n][n_heads][head_dim], token t at position pos[t];
// the first n_rot dims of each head rotate, the rest are left alone. Pair i (i < n_rot / 2)
// turns by angle freq_scale * pos * theta_scale^i / freq_factors[i] (theta_scale =
// freq_base^(-2 / n_rot), computed by the host as the CPU does). Normal mode pairs dims 2i and
// 2i + 1 (llama); neox mode pairs dims i and i + n_rot / 2 (Gemma, Qwen, GPT-NeoX).
// Global size (n_rot / 2, n_heads, n): one work-item per pair.

__kernel void rope(__global float* x, __global const int* pos, __global const float* freq_factors,
                   int n_heads, int head_dim, int n_rot, float theta_scale, float freq_scale, int neox) {
    const int i = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    const float theta = (float)pos[t] * pow(theta_scale, (float)i);
    const float angle = freq_scale * (theta / freq_factors[i]);
    const float c = cos(angle), s = sin(angle);
    __global float* head = x + ((ulong)t * n_heads + h) * head_dim;
    const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
}
