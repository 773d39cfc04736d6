// The routing and the weighted sum of a mixture-of-experts feed-forward (layers/decoder_layer.h,
// ExpertShape), in the CPU's float order (layers/cpu_moe.cpp), so that the device picks the CPU's
// experts and adds their outputs as the CPU does. The experts' matmuls are matmul.cl's *_id
// kernels; the GLUs elementwise.cl's. Built after vec_dot.cl (hsum8) and elementwise.cl
// (expf_ggml, expf_libm).
//
// A "slot" is one (token t, choice j) pair, s = t * n_used + j: the order of `selected`,
// `weights` and the experts' outputs, as the CPU's expert_out.
#pragma OPENCL FP_CONTRACT OFF  // every fma below is spelled out, as the CPU's code has it

// y[t][e] = W[e] . x[t] for F32 router weights W [n_expert][cols], as the CPU's vec_dot_f32_256
// (cpu/x86/quants_256.h) sums: four 8-lane FMA accumulators over steps of 32, reduced as
// (a0 + a2) + (a1 + a3) lane by lane and then hsum8, the tail (cols % 32) added in double. The
// device's float matmul (matmul.cl) splits a row over a work-group for speed, which is not that
// order; the router's last bits decide which experts run, so it takes this one.
// Global size (n_expert, n).
__kernel void router_logits_f32(__global const float* w, __global const float* x, __global float* y, int cols,
                                int n_expert) {
    const int e = get_global_id(0), t = get_global_id(1);
    __global const float* wr = w + (ulong)e * cols;
    __global const float* xr = x + (ulong)t * cols;
    float acc[4][8];
    for (int a = 0; a < 4; ++a)
        for (int l = 0; l < 8; ++l) acc[a][l] = 0.0f;
    const int np = cols & ~31;
    for (int i = 0; i < np; i += 32)
        for (int a = 0; a < 4; ++a)
            for (int l = 0; l < 8; ++l) acc[a][l] = fma(wr[i + 8 * a + l], xr[i + 8 * a + l], acc[a][l]);
    float lanes[8];
    for (int l = 0; l < 8; ++l) lanes[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
#ifdef cl_khr_fp64
    double sum = hsum8(lanes);
    for (int i = np; i < cols; ++i) sum += (double)(wr[i] * xr[i]);
#else
    float sum = hsum8(lanes);  // without doubles a tail may differ from the CPU in the last bit
    for (int i = np; i < cols; ++i) sum += wr[i] * xr[i];
#endif
    y[(ulong)t * n_expert + e] = (float)sum;
}

// ggml_soft_max of p[0 .. n-1] in place, as the CPU's soft_max_row: the max; exp(x - max) 8 at a
// time through ggml's vector expf, each 8's sum (hsum8) added to a double, libm's expf for the
// tail (cpu/x86/ops_avx2.cpp soft_max_avx2); then each times (float)(1 / sum).
inline void soft_max_row(__global float* p, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; ++i) max = max < p[i] ? p[i] : max;  // std::max(max, p[i])
#ifdef cl_khr_fp64
    double sum = 0.0;
#else
    float sum = 0.0f;  // without doubles the sum may differ from the CPU's in the last bit
#endif
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float v[8];
        for (int l = 0; l < 8; ++l) p[i + l] = v[l] = expf_ggml(p[i + l] - max);
        sum += hsum8(v);
    }
    for (; i < n; ++i) {
        p[i] = expf_libm(p[i] - max);
        sum += p[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int k = 0; k < n; ++k) p[k] *= inv;
}

// One token's routing (global size n): its router logits [n_expert] become probabilities in place
// (kept as logits with softmax_weight); selected and weights [n_used] get the n_used experts of
// highest value, highest first, ties by lower index (the CPU's partial sort), and their weights:
// the probabilities, renormalized by max(sum, 2^-14) with norm_weights (the sum in double); with
// softmax_weight (gpt-oss), the softmax of the chosen logits.
__kernel void moe_route(__global float* logits, __global int* selected, __global float* weights, int n_expert,
                        int n_used, int softmax_weight, int norm_weights) {
    const int t = get_global_id(0);
    __global float* p = logits + (ulong)t * n_expert;
    __global int* sel = selected + (ulong)t * n_used;
    __global float* w = weights + (ulong)t * n_used;
    if (!softmax_weight) soft_max_row(p, n_expert);
    // Choice j is the first in (value descending, index ascending) order after choice j - 1.
    float prev_p = INFINITY;
    int prev_i = -1;
    for (int j = 0; j < n_used; ++j) {
        int best = -1;
        for (int i = 0; i < n_expert; ++i) {
            const bool after_prev = p[i] < prev_p || (p[i] == prev_p && i > prev_i);
            if (after_prev && (best < 0 || p[i] > p[best])) best = i;
        }
        sel[j] = best;
        w[j] = p[best];
        prev_p = p[best];
        prev_i = best;
    }
    if (softmax_weight) soft_max_row(w, n_used);
    if (!norm_weights) return;
#ifdef cl_khr_fp64
    double total = 0.0;
#else
    float total = 0.0f;
#endif
    for (int j = 0; j < n_used; ++j) total += w[j];
    const float denom = fmax((float)total, 6.103515625e-5f);  // the smallest normal F16, ggml_clamp's
    for (int j = 0; j < n_used; ++j) w[j] = w[j] / denom;
}

// y[s][i] += b[selected[s]][i]: each slot's expert's bias, b [n_expert][width] (ggml_add_id).
// Global size n_slots * width.
__kernel void add_rows_id(__global float* y, __global const float* b, __global const int* selected, int width) {
    const size_t k = get_global_id(0);
    const size_t s = k / (size_t)width, i = k % (size_t)width;
    y[k] += b[(size_t)selected[s] * (size_t)width + i];
}

// out[t][i] = y[t][0][i] w[t][0] + y[t][1][i] w[t][1] + ... in j order, each product rounded
// before its add (ggml_mul, then ggml_add): y [n][n_used][d], w [n][n_used]. Global size (d, n).
__kernel void moe_weighted_sum(__global const float* y, __global const float* w, __global float* out, int d,
                               int n_used) {
    const int i = get_global_id(0), t = get_global_id(1);
    __global const float* yt = y + (ulong)t * n_used * d + i;
    __global const float* wt = w + (ulong)t * n_used;
    float o = yt[0] * wt[0];
    for (int j = 1; j < n_used; ++j) {
        const float weighted = yt[(ulong)j * d] * wt[j];
        o += weighted;
    }
    out[(ulong)t * d + i] = o;
}
