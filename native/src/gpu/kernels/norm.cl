// RMSNorm: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, rows of d floats; one work-group of
// NORM_WG items per row (global size n * NORM_WG). As the CPU (layers/cpu_blocks.cpp): each square
// rounded to float, summed in double (where the device has doubles; else a compensated float
// sum, which lands on the same float mean in all but rare cases), the mean rounded to float,
// scale = 1 / sqrt(mean + eps) (correctly rounded when the host could ask for it), then two
// float multiplies. x's rows start at x[x0] (a layer's rows r0..: gpu/ops.h, FloatsAt).
#pragma OPENCL FP_CONTRACT OFF
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#define NORM_WG 64

__kernel __attribute__((reqd_work_group_size(NORM_WG, 1, 1)))
void rms_norm(__global const float* x, ulong x0, __global const float* w, __global float* out, int d, float eps) {
    const int t = get_group_id(0), lid = get_local_id(0);
    __global const float* xt = x + x0 + (ulong)t * d;
    __global float* ot = out + (ulong)t * d;
#ifdef cl_khr_fp64
    __local double partial[NORM_WG];
    double sum = 0.0;
    for (int i = lid; i < d; i += NORM_WG) sum += (double)(xt[i] * xt[i]);
    partial[lid] = sum;
    for (int s = NORM_WG / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s) partial[lid] += partial[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float mean = (float)(partial[0] / (double)d);
#else
    // Kahan-Babuska (Neumaier) sums per item, then the group's sums and compensations.
    __local float partial[NORM_WG], comp[NORM_WG];
    float sum = 0.0f, c = 0.0f;
    for (int i = lid; i < d; i += NORM_WG) {
        const float v = xt[i] * xt[i], t = sum + v;
        c += fabs(sum) >= fabs(v) ? (sum - t) + v : (v - t) + sum;
        sum = t;
    }
    partial[lid] = sum;
    comp[lid] = c;
    for (int s = NORM_WG / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s) {
            const float a = partial[lid], b = partial[lid + s], t = a + b;
            comp[lid] += comp[lid + s] + (fabs(a) >= fabs(b) ? (a - t) + b : (b - t) + a);
            partial[lid] = t;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float mean = (partial[0] + comp[0]) / (float)d;
#endif
    const float scale = 1.0f / sqrt(mean + eps);
    for (int i = lid; i < d; i += NORM_WG) ot[i] = (xt[i] * scale) * w[i];
}
