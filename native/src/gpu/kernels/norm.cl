// RMSNorm: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, rows of d floats; one work-group of
// NORM_WG items per row (global size n * NORM_WG). The CPU sums the squares in double; devices
// need not have doubles, so the sum here is float, added pairwise across the group (error
// ~log2(d) ulp rather than the d ulp of one long float chain).
#define NORM_WG 64

__kernel __attribute__((reqd_work_group_size(NORM_WG, 1, 1)))
void rms_norm(__global const float* x, __global const float* w, __global float* out, int d, float eps) {
    __local float partial[NORM_WG];
    const int t = get_group_id(0), lid = get_local_id(0);
    __global const float* xt = x + (ulong)t * d;
    __global float* ot = out + (ulong)t * d;
    float sum = 0.0f;
    for (int i = lid; i < d; i += NORM_WG) sum += xt[i] * xt[i];
    partial[lid] = sum;
    for (int s = NORM_WG / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s) partial[lid] += partial[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float scale = 1.0f / sqrt(partial[0] / (float)d + eps);
    for (int i = lid; i < d; i += NORM_WG) ot[i] = (xt[i] * scale) * w[i];
}
