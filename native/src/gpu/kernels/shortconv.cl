// LFM2's gated short convolution (layers/shortconv_layer.h) on the device, operation for
// operation as the CPU computes it (layers/cpu_shortconv.cpp): B*x rounded, each output a sum
// over the taps from the oldest, every product rounded before it is added, times C.
#pragma OPENCL FP_CONTRACT OFF  // the CPU multiplies and adds without fma

// One work-item per channel c (global size d), over one sequence's n rows:
//   bcx   [n][3 d]  B, C, x of each row (the in-projection's output)
//   taps  [d][l]    each channel's kernel, oldest tap first
//   state [d][l-1]  each channel's last l-1 values of B*x before these rows (the host cache's
//                   layout, KvCache::recurrent_state), replaced by the last l-1 after them;
//                   read as zeros when `fresh` (the sequence starts at these rows)
//   y     [n][d]    C * conv
// The window of a channel is its state followed by the rows' B*x: entry i < l-1 is state[i],
// entry i >= l-1 is row i-(l-1)'s B*x, recomputed where it is read (the same product each time).
// Row t's B*x in channel c.
inline float gated(__global const float* bcx, int t, int c, int d) {
    const ulong r = (ulong)t * 3 * (ulong)d;
    return bcx[r + c] * bcx[r + 2 * (ulong)d + c];
}

__kernel void short_conv(__global const float* bcx, __global const float* taps, __global float* state,
                         __global float* y, int n, int d, int l, int fresh) {
    const int c = get_global_id(0);
    const int ds = l - 1;
    __global float* s = state + (ulong)c * ds;
    __global const float* k = taps + (ulong)c * l;
    for (int t = 0; t < n; ++t) {
        float sum = 0.0f;
        for (int j = 0; j < l; ++j) {
            const int i = t + j;  // window entry
            float w;
            if (i >= ds) w = gated(bcx, i - ds, c, d);
            else w = fresh ? 0.0f : s[i];
            sum += w * k[j];
        }
        y[(ulong)t * d + c] = bcx[(ulong)t * 3 * (ulong)d + d + c] * sum;
    }
    // The new state: window entries n .. n + ds - 1. Written in place in increasing order, each
    // from the entry n positions later (n >= 1), which is not yet overwritten.
    for (int i = 0; i < ds; ++i) {
        const int e = n + i;
        if (e >= ds) s[i] = gated(bcx, e - ds, c, d);
        else s[i] = fresh ? 0.0f : s[e];
    }
}
